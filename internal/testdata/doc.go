// Package testdata holds inputs captured from real servers for tests and
// benchmarks in other packages, and the code that captures them again.
// The go command skips folders named testdata in ./... patterns, so nothing
// here runs in make test: run it by its path (see proxysql/README.md).
package testdata
