WITH t AS (
  SELECT THREAD_ID, PROCESSLIST_ID FROM performance_schema.threads WHERE PROCESSLIST_ID IN (/*ids*/)
)
SELECT 'N' AS k, NULL AS pid, s.THREAD_ID AS tid, s.EVENT_ID AS a, NULL AS b, NULL AS c,
       NULL AS s1, NULL AS s2, NULL AS txt, s.TIMER_START AS t1, NULL AS t2, NULL AS n
  FROM performance_schema.events_statements_current s
  WHERE s.THREAD_ID = (SELECT THREAD_ID FROM performance_schema.threads WHERE PROCESSLIST_ID = CONNECTION_ID())
UNION ALL
SELECT 'C', NULL, NULL, NULL, NULL, NULL, NAME, ENABLED, NULL, NULL, NULL, NULL
  FROM performance_schema.setup_consumers
  WHERE NAME IN ('events_transactions_current', 'events_statements_current',
                 'events_statements_history', 'events_statements_history_long')
UNION ALL
SELECT 'I', NULL, NULL, NULL, NULL, NULL, NAME, CONCAT(ENABLED, '/', TIMED), NULL, NULL, NULL, NULL
  FROM performance_schema.setup_instruments WHERE NAME = 'transaction'
UNION ALL
SELECT 'T', t.PROCESSLIST_ID, t.THREAD_ID, x.EVENT_ID, x.END_EVENT_ID, x.NESTING_EVENT_ID,
       x.STATE, x.AUTOCOMMIT, NULL, x.TIMER_START, x.TIMER_END, NULL
  FROM t LEFT JOIN performance_schema.events_transactions_current x ON x.THREAD_ID = t.THREAD_ID
UNION ALL
SELECT 'S', t.PROCESSLIST_ID, s.THREAD_ID, s.EVENT_ID, s.END_EVENT_ID, s.NESTING_EVENT_ID,
       s.EVENT_NAME, s.NESTING_EVENT_TYPE, s.SQL_TEXT, s.TIMER_START, s.TIMER_END, NULL
  FROM t JOIN performance_schema.events_statements_current s ON s.THREAD_ID = t.THREAD_ID
UNION ALL
SELECT 'S', t.PROCESSLIST_ID, s.THREAD_ID, s.EVENT_ID, s.END_EVENT_ID, s.NESTING_EVENT_ID,
       s.EVENT_NAME, s.NESTING_EVENT_TYPE, s.SQL_TEXT, s.TIMER_START, s.TIMER_END, NULL
  FROM t JOIN performance_schema.events_statements_history s ON s.THREAD_ID = t.THREAD_ID
UNION ALL
SELECT 'S', t.PROCESSLIST_ID, s.THREAD_ID, s.EVENT_ID, s.END_EVENT_ID, s.NESTING_EVENT_ID,
       s.EVENT_NAME, s.NESTING_EVENT_TYPE, s.SQL_TEXT, s.TIMER_START, s.TIMER_END, NULL
  FROM t JOIN performance_schema.events_statements_history_long s ON s.THREAD_ID = t.THREAD_ID
UNION ALL
SELECT 'P', t.PROCESSLIST_ID, p.OWNER_THREAD_ID, p.OWNER_EVENT_ID, p.STATEMENT_ID, NULL,
       NULL, NULL, p.SQL_TEXT, NULL, NULL, p.COUNT_EXECUTE
  FROM t JOIN performance_schema.prepared_statements_instances p ON p.OWNER_THREAD_ID = t.THREAD_ID
