package conntag

import "testing"

var packetDSNs = []struct {
	dsn  string
	want int64
}{
	{"user:pw@tcp(127.0.0.1:3306)/db", defaultClientPacketLimit},
	{"user:pw@tcp(127.0.0.1:3306)/db?parseTime=true", defaultClientPacketLimit},
	{"user:pw@tcp(127.0.0.1:3306)/db?maxAllowedPacket=4096", 4096},
	{"user:pw@tcp(127.0.0.1:3306)/db?parseTime=true&maxAllowedPacket=0", 0},
	{"user:pw@tcp(127.0.0.1:3306)/db?maxAllowedPacket=x", defaultClientPacketLimit},
	{"user:p?maxAllowedPacket=1@tcp(127.0.0.1:3306)/db", defaultClientPacketLimit}, // a '?' in the password
	{"", defaultClientPacketLimit},
}

func TestClientPacketLimit(t *testing.T) {
	for _, tc := range packetDSNs {
		if got := clientPacketLimit(tc.dsn); got != tc.want {
			t.Errorf("clientPacketLimit(%q) = %d, want %d", tc.dsn, got, tc.want)
		}
	}
}

func FuzzClientPacketLimit(f *testing.F) {
	for _, tc := range packetDSNs {
		f.Add(tc.dsn)
	}
	f.Fuzz(func(t *testing.T, dsn string) {
		if n := clientPacketLimit(dsn); n < 0 {
			t.Errorf("clientPacketLimit(%q) = %d: negative", dsn, n)
		}
	})
}
