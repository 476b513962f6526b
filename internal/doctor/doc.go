// Package doctor holds what holdtime needs from the servers it reads, in
// one list, and checks it: the README's setup section states the list,
// testenv starts its MariaDB and ProxySQL with exactly it (ServerArgs,
// ProxySQLVariables, MonitorGrants), and `holdtime doctor` checks it on a
// user's targets, printing the fix of each missing item.
//
// Identify tells, in one connection and within two seconds, what answers at
// an address: a MySQL or MariaDB server, ProxySQL's admin or client
// interface, or something that does not speak the MySQL protocol. collect,
// top and doctor use it so that a port given to the wrong flag is named
// plainly instead of failing later with an error about a missing table.
package doctor
