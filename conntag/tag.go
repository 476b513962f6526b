package conntag

import (
	"context"
	"sync/atomic"
)

// MaxTagLen is the longest tag, in bytes, that a statement carries. Longer
// tags are cut.
const MaxTagLen = 64

// DefaultTag is the tag of statements whose context carries none, unless
// WithDefaultTag says otherwise.
const DefaultTag = "untagged"

// tagKey is the context key for a *tagValue.
type tagKey struct{}

// tagValue is what WithTag stores: the sanitised tag, sanitised once per
// context rather than once per statement.
type tagValue struct {
	name string
	// cached is the tag's state in the pool that last used this context,
	// which saves the tag lookup for every statement after the first.
	cached atomic.Pointer[tagState]
}

// WithTag returns a context whose statements carry tag, the business
// process that issues them (for example "checkout_completion"). Nested calls
// replace the tag. The tag is sanitised with SanitizeTag.
func WithTag(ctx context.Context, tag string) context.Context {
	return context.WithValue(ctx, tagKey{}, &tagValue{name: SanitizeTag(tag)})
}

// TagFrom returns the sanitised tag set on ctx by WithTag, and whether there
// is one.
func TagFrom(ctx context.Context) (string, bool) {
	if ctx == nil {
		return "", false
	}
	tv, ok := ctx.Value(tagKey{}).(*tagValue)
	if !ok {
		return "", false
	}
	return tv.name, true
}

// tagAllowed reports whether c may appear in a tag: [A-Za-z0-9_.:-]. The
// grammar keeps "*/" (which would end the comment) and "@" (which makes
// ProxySQL disable multiplexing for the digest) out of statement text.
func tagAllowed(c byte) bool {
	return 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' ||
		c == '_' || c == '.' || c == ':' || c == '-'
}

// SanitizeTag maps any string to a valid tag: every byte outside
// [A-Za-z0-9_.:-] becomes '_' (a multi-byte character becomes one '_'), the
// result is cut to MaxTagLen bytes, and an empty result becomes "_". It
// never fails, so a malformed tag is visible in the metrics rather than lost.
func SanitizeTag(tag string) string {
	valid := len(tag) > 0 && len(tag) <= MaxTagLen
	for i := 0; valid && i < len(tag); i++ {
		valid = tagAllowed(tag[i])
	}
	if valid {
		return tag
	}
	if tag == "" {
		return "_"
	}
	b := make([]byte, 0, min(len(tag), MaxTagLen))
	for i := 0; i < len(tag) && len(b) < MaxTagLen; {
		c := tag[i]
		switch {
		case tagAllowed(c):
			b = append(b, c)
			i++
		case c < 0x80:
			b = append(b, '_')
			i++
		default:
			// Skip the whole UTF-8 sequence (or one stray byte).
			b = append(b, '_')
			i++
			for i < len(tag) && tag[i]&0xC0 == 0x80 {
				i++
			}
		}
	}
	return string(b)
}
