-- Run once by the mysql image at first start (docker-entrypoint-initdb.d).
-- The shop database the workload sells in, the app user ProxySQL logs in
-- with (mysql_native_password: what ProxySQL 2.7 authenticates backends
-- with), and the collector's read-only monitoring account.
CREATE DATABASE IF NOT EXISTS shop;

CREATE USER IF NOT EXISTS 'app'@'%' IDENTIFIED WITH mysql_native_password BY 'app';
GRANT ALL PRIVILEGES ON shop.* TO 'app'@'%';

-- PROCESS: information_schema.PROCESSLIST and INNODB_TRX; performance_schema:
-- statement history and data_lock_waits. ProxySQL's monitor uses it too.
CREATE USER IF NOT EXISTS 'holdtime'@'%' IDENTIFIED WITH mysql_native_password BY 'holdtime';
GRANT PROCESS, REPLICATION CLIENT ON *.* TO 'holdtime'@'%';
GRANT SELECT ON performance_schema.* TO 'holdtime'@'%';
