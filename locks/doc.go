// Package locks names the business process behind every InnoDB lock.
package locks
