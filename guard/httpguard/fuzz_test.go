package httpguard_test

import (
	"strconv"
	"strings"
	"testing"

	"github.com/fencing-go/fencing/guard/httpguard"
)

// FuzzParse: Parse never panics, and a value it takes holds no comma (so
// Middleware can split a folded line at its commas) and is the canonical
// form's up to optional whitespace and the case of %XX escapes: its number
// is the token's decimal digits exactly (no sign, no leading zero, nothing
// that two parsers could compare differently), and Format's form of the
// result parses to the same resource and token.
func FuzzParse(f *testing.F) {
	for _, v := range []string{
		`42; resource="orders%2F42"`,
		`1;resource="a"`,
		"18446744073709551615 \t;\t resource=\"%00%ff\"",
		`9223372036854775807; resource="orders%2F42"`,
		`042; resource="a"`,
		`+42; resource="a"`,
		`42; resource="a"; x=1`,
		`0; resource="a"`,
		`1; resource="a,b"`,
		`1; resource="a%2Cb"`,
	} {
		f.Add(v)
	}
	f.Fuzz(func(t *testing.T, v string) {
		resource, token, err := httpguard.Parse(v)
		if err != nil {
			return
		}
		if strings.Contains(v, ",") {
			t.Fatalf("Parse(%q) took a value with a comma, as %q, %d", v, resource, token)
		}
		num, _, _ := strings.Cut(v, ";")
		if got := strings.Trim(num, " \t"); got != strconv.FormatUint(token, 10) {
			t.Fatalf("Parse(%q) took the number %q as token %d", v, got, token)
		}
		canon := httpguard.Format(resource, token)
		r2, t2, err := httpguard.Parse(canon)
		if err != nil || r2 != resource || t2 != token {
			t.Fatalf("Parse(%q) = %q, %d; its canonical form %q parses to %q, %d, %v", v, resource, token, canon, r2, t2, err)
		}
	})
}
