// Package header is the one definition of the text form of a fencing token
// on the wire, shared by guard/httpguard (the Fencing-Token and
// Fencing-Fence headers) and guard/grpcguard (the fencing-token and
// fencing-fence metadata):
//
//	value    = number OWS ";" OWS "resource=" DQUOTE escaped DQUOTE
//	number   = "0" / ( %x31-39 *19DIGIT )  ; decimal, at most 2^64-1
//	escaped  = *( ALPHA / DIGIT / "-" / "." / "_" / "~" / "%" HEXDIG HEXDIG )
//
// for example `42; resource="orders%2F42"`. The resource's bytes are
// percent-encoded: every byte other than ALPHA, DIGIT, "-", ".", "_" and
// "~" is written as "%" and two hex digits (Format writes them upper-case;
// Parse takes either case), so any byte string, UTF-8 or not, fits in one
// header line. Parse refuses anything else: other characters, other
// parameters, leading zeros, a number past 2^64-1. No value it takes holds
// a comma (a resource's is written %2C), so an HTTP line of values joined by
// commas splits at its commas into the values.
package header

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
)

// ErrMalformed is returned by Parse for a value that is not in the syntax.
var ErrMalformed = errors.New("malformed fencing token")

const hex = "0123456789ABCDEF"

// Format returns the text form of number for resource.
func Format(resource string, number uint64) string {
	var b strings.Builder
	b.Grow(len(resource) + 32)
	b.WriteString(strconv.FormatUint(number, 10))
	b.WriteString(`; resource="`)
	for i := 0; i < len(resource); i++ {
		c := resource[i]
		if unreserved(c) {
			b.WriteByte(c)
			continue
		}
		b.WriteByte('%')
		b.WriteByte(hex[c>>4])
		b.WriteByte(hex[c&15])
	}
	b.WriteByte('"')
	return b.String()
}

func unreserved(c byte) bool {
	return 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || c == '-' || c == '.' || c == '_' || c == '~'
}

// Parse returns the resource and number of a value Format wrote, or an
// error wrapping ErrMalformed that says what is wrong. It does not check
// the resource's length or the number's range beyond uint64: the guards
// do.
func Parse(v string) (resource string, number uint64, err error) {
	num, rest, ok := strings.Cut(v, ";")
	if !ok {
		return "", 0, fmt.Errorf(`%w: %q has no "; resource=" parameter`, ErrMalformed, short(v))
	}
	num = strings.TrimRight(strings.TrimLeft(num, " \t"), " \t")
	if num == "" || num[0] < '0' || num[0] > '9' || (len(num) > 1 && num[0] == '0') {
		return "", 0, fmt.Errorf("%w: %q is not a decimal number without leading zeros", ErrMalformed, short(num))
	}
	number, err = strconv.ParseUint(num, 10, 64)
	if err != nil {
		return "", 0, fmt.Errorf("%w: %q is not a decimal number up to 2^64-1", ErrMalformed, short(num))
	}
	rest = strings.TrimLeft(rest, " \t")
	quoted, ok := strings.CutPrefix(rest, `resource="`)
	switch {
	case ok:
	case strings.HasPrefix(rest, "resource="):
		return "", 0, fmt.Errorf(`%w: %q: the resource is not quoted: want resource="..."`, ErrMalformed, short(rest))
	case strings.Contains(rest, ";"):
		return "", 0, fmt.Errorf(`%w: more than one parameter: only resource="..." may follow the number`, ErrMalformed)
	default:
		return "", 0, fmt.Errorf(`%w: %q: want resource="..." after the number (and no other parameter)`, ErrMalformed, short(rest))
	}
	// No escaped byte is a quote: the first quote closes the resource.
	escaped, after, ok := strings.Cut(quoted, `"`)
	switch {
	case !ok:
		return "", 0, fmt.Errorf(`%w: the resource has no closing quote`, ErrMalformed)
	case strings.HasPrefix(strings.TrimLeft(after, " \t"), ";"):
		return "", 0, fmt.Errorf(`%w: more than one parameter: only resource="..." may follow the number`, ErrMalformed)
	case after != "":
		return "", 0, fmt.Errorf(`%w: %q follows the resource's closing quote (a quote in a resource is written %%22)`, ErrMalformed, short(after))
	}
	var b strings.Builder
	b.Grow(len(escaped))
	for i := 0; i < len(escaped); i++ {
		c := escaped[i]
		switch {
		case unreserved(c):
			b.WriteByte(c)
		case c == '%' && i+2 < len(escaped) && isHex(escaped[i+1]) && isHex(escaped[i+2]):
			b.WriteByte(unhex(escaped[i+1])<<4 | unhex(escaped[i+2]))
			i += 2
		default:
			return "", 0, fmt.Errorf(`%w: byte %d of the resource, %q, is neither A-Z a-z 0-9 - . _ ~ nor a %%XX escape`, ErrMalformed, i, c)
		}
	}
	return b.String(), number, nil
}

func isHex(c byte) bool {
	return '0' <= c && c <= '9' || 'a' <= c && c <= 'f' || 'A' <= c && c <= 'F'
}

func unhex(c byte) byte {
	switch {
	case c <= '9':
		return c - '0'
	case c <= 'F':
		return c - 'A' + 10
	}
	return c - 'a' + 10
}

// Detail returns what a Parse error says is wrong, without the
// ErrMalformed prefix, for a carrier's own error.
func Detail(err error) string {
	return strings.TrimPrefix(err.Error(), ErrMalformed.Error()+": ")
}

// short cuts a long piece of a bad value for an error message.
func short(s string) string {
	if len(s) > 64 {
		return s[:64] + "..."
	}
	return s
}
