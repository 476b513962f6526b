package main

import (
	"testing"

	"github.com/holdtime/holdtime/testenv"
)

// TestMain stops the test server the command tests share, if one started.
func TestMain(m *testing.M) { testenv.Main(m) }
