package faultproxy

import (
	"bufio"
	"encoding/binary"
	"io"
)

// readFrame reads one protocol packet: a 4-byte header (payload length,
// little-endian 24 bits, then the sequence number) and its payload. The
// frame is returned whole, to be forwarded byte for byte.
func readFrame(r *bufio.Reader) ([]byte, error) {
	var hdr [4]byte
	if _, err := io.ReadFull(r, hdr[:]); err != nil {
		return nil, err
	}
	n := int(hdr[0]) | int(hdr[1])<<8 | int(hdr[2])<<16
	frame := make([]byte, 4+n)
	copy(frame, hdr[:])
	if _, err := io.ReadFull(r, frame[4:]); err != nil {
		return nil, err
	}
	return frame, nil
}

// command returns the command a client frame starts, or false when the frame
// is not the first packet of a command (sequence number 0).
func command(frame []byte, connID uint32) (Command, bool) {
	if len(frame) < 5 || frame[3] != 0 {
		return Command{}, false
	}
	c := Command{ConnectionID: connID, Code: frame[4]}
	if c.Code == ComQuery {
		c.Query = string(frame[5:])
	}
	return c, true
}

// Capability flags the proxy clears in the server's greeting so that the
// client neither switches to TLS nor compresses packets.
const (
	capCompress = 0x0020     // CLIENT_COMPRESS (lower 2 bytes)
	capSSL      = 0x0800     // CLIENT_SSL (lower 2 bytes)
	capZstd     = 0x04000000 // CLIENT_ZSTD_COMPRESSION_ALGORITHM (upper 2 bytes, MySQL 8)
)

// patchGreeting clears the TLS and compression capabilities in a server
// greeting (HandshakeV10) in place and returns the connection id it
// carries. A frame that is not such a greeting (an error packet, or one too
// short) is left alone and gives 0.
//
// HandshakeV10: protocol version 10, server version (NUL-terminated),
// connection id (4), auth data part 1 (8), filler (1), capabilities lower
// (2), charset (1), status (2), capabilities upper (2), …
func patchGreeting(frame []byte) uint32 {
	if len(frame) < 5 || frame[4] != 10 {
		return 0
	}
	p := frame[4:]
	end := -1
	for i := 1; i < len(p); i++ {
		if p[i] == 0 {
			end = i
			break
		}
	}
	if end < 0 {
		return 0
	}
	idPos := end + 1
	lower := idPos + 4 + 8 + 1
	if lower+2 > len(p) {
		return 0
	}
	id := binary.LittleEndian.Uint32(p[idPos:])
	caps := binary.LittleEndian.Uint16(p[lower:]) &^ (capCompress | capSSL)
	binary.LittleEndian.PutUint16(p[lower:], caps)
	if upper := lower + 2 + 1 + 2; upper+2 <= len(p) {
		caps := binary.LittleEndian.Uint16(p[upper:]) &^ uint16(capZstd>>16)
		binary.LittleEndian.PutUint16(p[upper:], caps)
	}
	return id
}
