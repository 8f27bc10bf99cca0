package header

import (
	"errors"
	"strings"
	"testing"
)

func TestFormat(t *testing.T) {
	for _, c := range []struct {
		resource string
		number   uint64
		want     string
	}{
		{"orders/42", 42, `42; resource="orders%2F42"`},
		{"a-Z_0.9~", 1, `1; resource="a-Z_0.9~"`},
		{"a b\"c;%", 7, `7; resource="a%20b%22c%3B%25"`},
		{"\x00\xff", 18446744073709551615, `18446744073709551615; resource="%00%FF"`},
		{"é", 3, `3; resource="%C3%A9"`},
		{"", 0, `0; resource=""`},
	} {
		if got := Format(c.resource, c.number); got != c.want {
			t.Errorf("Format(%q, %d) = %s, want %s", c.resource, c.number, got, c.want)
		}
		r, n, err := Parse(c.want)
		if err != nil || r != c.resource || n != c.number {
			t.Errorf("Parse(%s) = %q, %d, %v; want %q, %d", c.want, r, n, err, c.resource, c.number)
		}
	}
}

func TestParse(t *testing.T) {
	for v, want := range map[string]string{
		`42;resource="a%2fb"`:         "a/b", // no spaces, lower-case hex
		"42 \t;\t resource=\"a\"":     "a",
		` 42 ; resource="orders%2F1"`: "orders/1",
	} {
		if r, n, err := Parse(v); err != nil || r != want || n != 42 {
			t.Errorf("Parse(%q) = %q, %d, %v; want %q, 42", v, r, n, err, want)
		}
	}
	for _, v := range []string{
		``,
		`42`,
		`42; resource=a`,
		`42; resource="a`,
		`42; resource="a" `,
		`42; resource="a"; x=1`,
		`42; other="a"`,
		`42; resource="a/b"`,
		`42; resource="a b"`,
		`42; resource="%2"`,
		`42; resource="%zz"`,
		`042; resource="a"`,
		`+42; resource="a"`,
		`-1; resource="a"`,
		`18446744073709551616; resource="a"`,
		`4 2; resource="a"`,
		`; resource="a"`,
		"42; resource=\"\xff\"",
	} {
		if r, n, err := Parse(v); !errors.Is(err, ErrMalformed) {
			t.Errorf("Parse(%q) = %q, %d, %v; want ErrMalformed", v, r, n, err)
		}
	}
}

// No value Parse takes holds a comma, wherever it stands (a resource's
// comma is written %2C), so an HTTP line of values joined by commas splits
// into the values it came from.
func TestParseRefusesCommas(t *testing.T) {
	v := ` 42 ; resource="a%2Cb"`
	if r, n, err := Parse(v); err != nil || r != "a,b" || n != 42 {
		t.Fatalf("Parse(%q) = %q, %d, %v", v, r, n, err)
	}
	for i := 0; i <= len(v); i++ {
		w := v[:i] + "," + v[i:]
		if r, n, err := Parse(w); !errors.Is(err, ErrMalformed) {
			t.Errorf("Parse(%q) = %q, %d, %v; want ErrMalformed", w, r, n, err)
		}
	}
}

func FuzzRoundTrip(f *testing.F) {
	f.Add("orders/42", uint64(42))
	f.Add("\x00%\"; ", uint64(1))
	f.Add("a,b", uint64(7))
	f.Fuzz(func(t *testing.T, resource string, number uint64) {
		v := Format(resource, number)
		if strings.ContainsAny(v, "\r\n\x00,") {
			t.Fatalf("Format(%q) = %q holds a byte a header cannot, or a comma", resource, v)
		}
		r, n, err := Parse(v)
		if err != nil || r != resource || n != number {
			t.Fatalf("Parse(Format(%q, %d)) = %q, %d, %v", resource, number, r, n, err)
		}
	})
}
