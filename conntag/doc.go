// Package conntag wraps a database/sql driver so that every statement
// carries the business process that issued it, and measures per process how
// long connections are held, actively used and idly held.
//
// Adoption is one line: conntag.Open instead of sql.Open. The result is a
// plain *sql.DB for your own code, sqlx, gorm, ent or sqlc output:
//
//	db, err := conntag.Open("mysql", dsn)
//	...
//	ctx = conntag.WithTag(ctx, "checkout_completion")
//	db.QueryContext(ctx, "SELECT ...") // sent as /* conn_tag:checkout_completion */ SELECT ...
package conntag
