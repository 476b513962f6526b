package faultproxy

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"testing"
)

func TestStatement(t *testing.T) {
	commit := Statement("COMMIT")
	for _, tc := range []struct {
		cmd  Command
		want bool
	}{
		{Command{Code: ComQuery, Query: "COMMIT"}, true},
		{Command{Code: ComQuery, Query: "commit;"}, true},
		{Command{Code: ComQuery, Query: "  /* conn_tag:checkout */ /* x */ COMMIT "}, true},
		{Command{Code: ComQuery, Query: "COMMIT WORK"}, false},
		{Command{Code: ComQuery, Query: "/* COMMIT"}, false},
		{Command{Code: ComQuery, Query: "ROLLBACK"}, false},
		{Command{Code: 0x16, Query: "COMMIT"}, false}, // not a text statement
	} {
		if got := commit(tc.cmd); got != tc.want {
			t.Errorf("Statement(COMMIT)(%+v) = %v, want %v", tc.cmd, got, tc.want)
		}
	}
}

func TestStatementPrefix(t *testing.T) {
	ledger := StatementPrefix("insert into inventory_ledger")
	for _, tc := range []struct {
		cmd  Command
		want bool
	}{
		{Command{Code: ComQuery, Query: "INSERT INTO inventory_ledger (a) VALUES (1)"}, true},
		{Command{Code: ComQuery, Query: "/* conn_tag:inventory_stock */ insert INTO inventory_ledger (a) VALUES (1)"}, true},
		{Command{Code: ComQuery, Query: "INSERT INTO inventory_ledgers"}, true}, // a prefix is a prefix
		{Command{Code: ComQuery, Query: "INSERT INTO inventory"}, false},
		{Command{Code: ComQuery, Query: "UPDATE inventory_ledger SET a = 1"}, false},
		{Command{Code: 0x17, Query: "INSERT INTO inventory_ledger"}, false},
	} {
		if got := ledger(tc.cmd); got != tc.want {
			t.Errorf("StatementPrefix(%+v) = %v, want %v", tc.cmd, got, tc.want)
		}
	}
}

// greeting builds a HandshakeV10 packet with the given capabilities.
func greeting(connID uint32, caps uint32) []byte {
	var p bytes.Buffer
	p.WriteByte(10)
	p.WriteString("10.11.19-MariaDB\x00")
	binary.Write(&p, binary.LittleEndian, connID)
	p.WriteString("12345678\x00")
	binary.Write(&p, binary.LittleEndian, uint16(caps))
	p.WriteByte(45)                                  // charset
	binary.Write(&p, binary.LittleEndian, uint16(2)) // status
	binary.Write(&p, binary.LittleEndian, uint16(caps>>16))
	p.WriteString("\x15\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00abcdefghijkl\x00mysql_native_password\x00")
	frame := []byte{byte(p.Len()), byte(p.Len() >> 8), byte(p.Len() >> 16), 0}
	return append(frame, p.Bytes()...)
}

func TestPatchGreeting(t *testing.T) {
	all := uint32(0xffffffff)
	frame := greeting(4242, all)
	if id := patchGreeting(frame); id != 4242 {
		t.Fatalf("connection id %d, want 4242", id)
	}
	r := bufio.NewReader(bytes.NewReader(frame))
	got, err := readFrame(r)
	if err != nil || !bytes.Equal(got, frame) {
		t.Fatalf("readFrame = %x, %v", got, err)
	}
	p := frame[4:]
	lower := 1 + len("10.11.19-MariaDB") + 1 + 4 + 8 + 1
	caps := uint32(binary.LittleEndian.Uint16(p[lower:])) | uint32(binary.LittleEndian.Uint16(p[lower+5:]))<<16
	if caps&(capSSL|capCompress|capZstd) != 0 {
		t.Errorf("capabilities %#x still offer TLS or compression", caps)
	}
	if want := all &^ (capSSL | capCompress | capZstd); caps != want {
		t.Errorf("capabilities %#x, want %#x (only TLS and compression cleared)", caps, want)
	}
	// An error packet instead of a greeting is left alone.
	errPacket := []byte{9, 0, 0, 0, 0xff, 0x10, 0x04, 'T', 'o', 'o', ' ', 'm', 'a'}
	orig := bytes.Clone(errPacket)
	if id := patchGreeting(errPacket); id != 0 || !bytes.Equal(errPacket, orig) {
		t.Errorf("error packet changed: %x -> %x (id %d)", orig, errPacket, id)
	}
}

func TestCommand(t *testing.T) {
	q := []byte{7, 0, 0, 0, ComQuery, 'C', 'O', 'M', 'M', 'I', 'T'}
	if c, ok := command(q, 9); !ok || c.Query != "COMMIT" || c.ConnectionID != 9 {
		t.Errorf("command(COMMIT) = %+v, %v", c, ok)
	}
	q[3] = 1 // a continuation or handshake packet, not a command
	if _, ok := command(q, 9); ok {
		t.Error("a packet with sequence number 1 was taken for a command")
	}
}

// FuzzPackets: no frame makes the parsers panic, and patching changes at
// most the capability bytes.
func FuzzPackets(f *testing.F) {
	f.Add(greeting(1, 0xffffffff))
	f.Add([]byte{7, 0, 0, 0, ComQuery, 'C', 'O', 'M', 'M', 'I', 'T'})
	f.Add([]byte{1, 0, 0, 0, 10})
	f.Add([]byte{3, 0, 0, 0, 10, 'x', 0})
	f.Fuzz(func(t *testing.T, frame []byte) {
		orig := bytes.Clone(frame)
		if got, err := readFrame(bufio.NewReader(bytes.NewReader(frame))); err == nil && !bytes.Equal(got, frame[:len(got)]) {
			t.Fatalf("readFrame changed the bytes: %x of %x", got, frame)
		}
		command(frame, 1)
		patchGreeting(frame)
		if len(frame) != len(orig) {
			t.Fatal("patchGreeting changed the length")
		}
		diff := 0
		for i := range frame {
			if frame[i] != orig[i] {
				diff++
			}
		}
		if diff > 3 {
			t.Fatalf("patchGreeting changed %d bytes, at most 3 capability bytes may change", diff)
		}
		normalize(string(frame))
		Statement("COMMIT")(Command{Code: ComQuery, Query: string(frame)})
		StatementPrefix("Ä")(Command{Code: ComQuery, Query: string(frame)})
	})
}
