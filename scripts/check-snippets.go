//go:build ignore

// check-snippets type-checks every ```go block of README.md and docs/*.md
// against the code, so that a signature change cannot leave a snippet
// behind that no longer compiles. It is part of check-docs
// (scripts/check-docs.sh runs both files, and .ci/run calls that):
//
//	go run scripts/check-docs.go scripts/check-snippets.go
//
// A block is one of:
//
//   - a whole program (it starts with "package"): checked as it is;
//   - a fragment: its statements are wrapped in a function returning error,
//     its top-level func and type declarations (a line starting "func " or
//     "type ", to the "}" that closes it at the start of a line) and its
//     import block kept at file level, and a line that is only "..." (text
//     left out) dropped.
//
// A fragment's imports are added from the package names it uses (the table
// imports below: this module's packages, the standard library's, the store
// clients'). The names a fragment uses without declaring them (ctx, c,
// lease, db...) are package-level variables of the types in givens below,
// declared when the fragment names them. A block that needs another
// declaration says so in an HTML comment on the line before it, which
// GitHub does not show:
//
//	<!-- snippet: var b *sqlbackend.Backend -->
//
// (any Go declarations, several separated by ";"), and a block that cannot
// compile says why:
//
//	<!-- snippet: skip: uses the service's generated gRPC package -->
//
// Unused variables and imports are allowed (a fragment shows a part). Each
// block is checked in the first of the library's modules (the root,
// kubebackend, bench) whose dependencies include every package it imports.
//
// Each problem is reported as check-docs reports its own.
package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"go/ast"
	"go/importer"
	"go/parser"
	"go/token"
	"go/types"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
)

// imports maps the package names fragments use to their import paths.
var imports = map[string]string{
	"fencing":       "github.com/fencing-go/fencing",
	"backend":       "github.com/fencing-go/fencing/backend",
	"conformance":   "github.com/fencing-go/fencing/conformance",
	"election":      "github.com/fencing-go/fencing/election",
	"semaphore":     "github.com/fencing-go/fencing/semaphore",
	"rwlock":        "github.com/fencing-go/fencing/rwlock",
	"memorybackend": "github.com/fencing-go/fencing/memorybackend",
	"etcdbackend":   "github.com/fencing-go/fencing/etcdbackend",
	"redisbackend":  "github.com/fencing-go/fencing/redisbackend",
	"sqlbackend":    "github.com/fencing-go/fencing/sqlbackend",
	"kubebackend":   "github.com/fencing-go/fencing/kubebackend",
	"kubeguard":     "github.com/fencing-go/fencing/kubebackend/kubeguard",
	"guard":         "github.com/fencing-go/fencing/guard",
	"etcdguard":     "github.com/fencing-go/fencing/guard/etcdguard",
	"grpcguard":     "github.com/fencing-go/fencing/guard/grpcguard",
	"httpguard":     "github.com/fencing-go/fencing/guard/httpguard",
	"redisguard":    "github.com/fencing-go/fencing/guard/redisguard",
	"sqlguard":      "github.com/fencing-go/fencing/guard/sqlguard",

	"context": "context",
	"errors":  "errors",
	"fmt":     "fmt",
	"hex":     "encoding/hex",
	"hmac":    "crypto/hmac",
	"http":    "net/http",
	"io":      "io",
	"json":    "encoding/json",
	"log":     "log",
	"os":      "os",
	"sha256":  "crypto/sha256",
	"slog":    "log/slog",
	"sql":     "database/sql",
	"syscall": "syscall",
	"testing": "testing",
	"time":    "time",

	"clientv3":    "go.etcd.io/etcd/client/v3",
	"grpc":        "google.golang.org/grpc",
	"redis":       "github.com/redis/go-redis/v9",
	"metric":      "go.opentelemetry.io/otel/metric",
	"propagation": "go.opentelemetry.io/otel/propagation",
	"kubernetes":  "k8s.io/client-go/kubernetes",
	"rest":        "k8s.io/client-go/rest",
	"metav1":      "k8s.io/apimachinery/pkg/apis/meta/v1",
	"corev1":      "k8s.io/api/core/v1",
	"credentials": "google.golang.org/grpc/credentials",
	"typedcorev1": "k8s.io/client-go/kubernetes/typed/core/v1",
	"admissionv1": "k8s.io/api/admissionregistration/v1",
}

// givens declares the names fragments use without declaring them.
var givens = map[string]string{
	"ctx":       "var ctx context.Context",
	"c":         "var c *fencing.Coordinator",
	"coord":     "var coord *fencing.Coordinator",
	"b":         "var b backend.Backend",
	"myBackend": "var myBackend backend.Backend",
	"lease":     "var lease fencing.Lease",
	"held":      "var held *fencing.Held",
	"db":        "var db *sql.DB",
	"cli":       "var cli *clientv3.Client",
	"client":    "var client *redis.Client",
	"cs":        "var cs kubernetes.Interface",
	"total":     "var total map[int]int",
	"g":         "var g *sqlguard.Guard",
	"id":        "var id int",
	"key":       "var key []byte",
	"mc":        "var mc *guard.MintCheck",
	"mem":       "var mem *guard.Memory",
	"provider":  "var provider metric.MeterProvider",
	"logger":    "var logger *slog.Logger",
	"t":         "var t *testing.T",
	"url":       "var url string",
	"body":      "var body io.Reader",
	"req":       "var req *http.Request",
	"addr":      "var addr string",
	"next":      "var next http.Handler",
	"orders":    "var orders map[int]int",
	"schedule":  "var schedule func(context.Context, uint64) error",
	"export":    "var export func(context.Context, string, uint64)",
}

// modules are where blocks are checked, in order of preference.
var modules = []string{".", "kubebackend", "bench"}

type block struct {
	file   string
	line   int // of the opening fence
	text   string
	note   string // the <!-- snippet: ... --> before it
	src    []byte // the file checked
	paths  []string
	module string
}

// checkSnippets checks the Go blocks of pages and returns how many it
// checked and how many are skipped with a reason.
func checkSnippets(pages []string) (checked, skipped int) {
	var blocks []*block
	for _, p := range pages {
		blocks = append(blocks, readBlocks(p)...)
	}
	all := map[string]bool{}
	var ready []*block
	for _, b := range blocks {
		if strings.HasPrefix(b.note, "skip:") {
			skipped++
			if strings.TrimSpace(strings.TrimPrefix(b.note, "skip:")) == "" {
				report(b.file, b.line, "a skipped snippet says why: <!-- snippet: skip: REASON -->")
			}
			continue
		}
		if err := assemble(b); err != nil {
			report(b.file, b.line, "%v", err)
			continue
		}
		for _, p := range b.paths {
			all[p] = true
		}
		ready = append(ready, b)
	}
	var paths []string
	for p := range all {
		paths = append(paths, p)
	}
	sort.Strings(paths)
	exports := map[string]map[string]string{}
	for _, m := range modules {
		exp, err := exportData(m, paths)
		if err != nil {
			report(m+"/go.mod", 0, "%v", err)
			return checked, skipped
		}
		exports[m] = exp
	}
	for _, b := range ready {
		for _, m := range modules {
			ok := true
			for _, p := range b.paths {
				if exports[m][p] == "" {
					ok = false
					break
				}
			}
			if ok {
				b.module = m
				break
			}
		}
		if b.module == "" {
			report(b.file, b.line, "no module of the repository has every package the snippet imports (%s)", strings.Join(b.paths, ", "))
			continue
		}
		typeCheck(b, exports[b.module])
		checked++
	}
	return checked, skipped
}

var notePattern = regexp.MustCompile(`^<!--\s*snippet:\s*(.*?)\s*-->$`)

func readBlocks(page string) []*block {
	data, err := os.ReadFile(page)
	if err != nil {
		report(page, 0, "%v", err)
		return nil
	}
	lines := strings.Split(string(data), "\n")
	var out []*block
	for i := 0; i < len(lines); i++ {
		if strings.TrimSpace(lines[i]) != "```go" {
			continue
		}
		b := &block{file: page, line: i + 1}
		for j := i - 1; j >= 0 && j >= i-2; j-- {
			if m := notePattern.FindStringSubmatch(strings.TrimSpace(lines[j])); m != nil {
				b.note = m[1]
				break
			}
			if strings.TrimSpace(lines[j]) != "" {
				break
			}
		}
		j := i + 1
		for j < len(lines) && strings.TrimSpace(lines[j]) != "```" {
			j++
		}
		b.text = strings.Join(lines[i+1:j], "\n")
		out = append(out, b)
		i = j
	}
	return out
}

// assemble makes b's text a Go file.
func assemble(b *block) error {
	if strings.HasPrefix(strings.TrimSpace(b.text), "package ") {
		b.src = []byte(b.text)
	} else {
		var decls, stmts, importBlock []string
		lines := strings.Split(b.text, "\n")
		for i := 0; i < len(lines); i++ {
			l := lines[i]
			switch {
			case strings.TrimSpace(l) == "...":
				stmts = append(stmts, "")
			case strings.HasPrefix(l, "func ") || strings.HasPrefix(l, "type "):
				// A one-line declaration, or up to its closing "}".
				for ; i < len(lines); i++ {
					if strings.TrimSpace(lines[i]) != "..." {
						decls = append(decls, lines[i])
					}
					if !strings.HasSuffix(l, "{") && !strings.HasSuffix(l, "(") || lines[i] == "}" || lines[i] == ")" {
						break
					}
				}
			case strings.HasPrefix(l, "import ("):
				for ; i < len(lines) && lines[i] != ")"; i++ {
					importBlock = append(importBlock, lines[i])
				}
				importBlock = append(importBlock, ")")
			case strings.HasPrefix(l, "import "):
				importBlock = append(importBlock, l)
			default:
				stmts = append(stmts, l)
			}
		}
		var src strings.Builder
		src.WriteString("package snippet\n\n")
		src.WriteString(strings.Join(importBlock, "\n") + "\n\n")
		src.WriteString(strings.Join(decls, "\n") + "\n\n")
		if b.note != "" {
			for _, d := range strings.Split(b.note, ";") {
				src.WriteString(strings.TrimSpace(d) + "\n")
			}
		}
		src.WriteString("\nfunc snippet() error {\n" + strings.Join(stmts, "\n") + "\n\treturn nil\n}\n")
		b.src = []byte(src.String())
		// Declare the givens the text names and the note does not declare.
		var given []string
		for name, decl := range givens {
			if regexp.MustCompile(`\b`+name+`\b`).MatchString(b.text) &&
				!regexp.MustCompile(`\b(var|type|func)\s+(\w+\s*,\s*)*`+name+`\b`).MatchString(b.note) {
				given = append(given, decl)
			}
		}
		sort.Strings(given)
		b.src = append(b.src, []byte("\n"+strings.Join(given, "\n")+"\n")...)
	}
	// Add the imports of the package names the file uses and does not
	// import itself.
	fset := token.NewFileSet()
	f, err := parser.ParseFile(fset, "snippet.go", b.src, parser.SkipObjectResolution)
	if err != nil {
		return fmt.Errorf("the snippet does not parse: %v", firstLine(err))
	}
	have := map[string]bool{}
	for _, im := range f.Imports {
		p, _ := strconv.Unquote(im.Path.Value)
		b.paths = append(b.paths, p)
		name := filepath.Base(p)
		if im.Name != nil {
			name = im.Name.Name
		} else if strings.HasPrefix(name, "v") && strings.Contains(p, "/") {
			name = filepath.Base(filepath.Dir(p)) // .../go-redis/v9
		}
		have[name] = true
	}
	declared := map[string]bool{}
	ast.Inspect(f, func(n ast.Node) bool {
		switch n := n.(type) {
		case *ast.AssignStmt:
			if n.Tok == token.DEFINE {
				for _, l := range n.Lhs {
					if id, ok := l.(*ast.Ident); ok {
						declared[id.Name] = true
					}
				}
			}
		case *ast.ValueSpec:
			for _, id := range n.Names {
				declared[id.Name] = true
			}
		}
		return true
	})
	var add []string
	ast.Inspect(f, func(n ast.Node) bool {
		sel, ok := n.(*ast.SelectorExpr)
		if !ok {
			return true
		}
		id, ok := sel.X.(*ast.Ident)
		if !ok || have[id.Name] || declared[id.Name] {
			return true
		}
		if p, ok := imports[id.Name]; ok {
			have[id.Name] = true
			add = append(add, p)
		}
		return true
	})
	if len(add) > 0 {
		var ims strings.Builder
		for _, p := range add {
			name := ""
			if base := filepath.Base(p); base != nameOf(p) {
				name = nameOf(p) + " "
			}
			fmt.Fprintf(&ims, "import %s%q\n", name, p)
			b.paths = append(b.paths, p)
		}
		b.src = bytes.Replace(b.src, []byte("\n"), []byte("\n"+ims.String()), 1)
	}
	sort.Strings(b.paths)
	return nil
}

// nameOf returns the name fragments use for import path p.
func nameOf(p string) string {
	for name, q := range imports {
		if q == p {
			return name
		}
	}
	return filepath.Base(p)
}

func firstLine(err error) string {
	s := err.Error()
	if i := strings.IndexByte(s, '\n'); i >= 0 {
		s = s[:i]
	}
	return s
}

// exportData returns the export data files of paths and their dependencies
// as module m builds them; a path m cannot build is missing.
func exportData(m string, paths []string) (map[string]string, error) {
	// Only the paths of the modules m's go.mod requires: go list refuses
	// the others.
	cmd := exec.Command("go", "mod", "edit", "-json")
	cmd.Dir = m
	raw, err := cmd.Output()
	if err != nil {
		return nil, fmt.Errorf("go mod edit -json in %s: %w", m, err)
	}
	var gomod struct {
		Module  struct{ Path string }
		Require []struct{ Path string }
	}
	if err := json.Unmarshal(raw, &gomod); err != nil {
		return nil, fmt.Errorf("go mod edit -json in %s: %w", m, err)
	}
	mods := []string{gomod.Module.Path}
	for _, r := range gomod.Require {
		mods = append(mods, r.Path)
	}
	var in []string
	for _, p := range paths {
		std := !strings.Contains(strings.Split(p, "/")[0], ".")
		for _, mod := range mods {
			if p == mod || strings.HasPrefix(p, mod+"/") {
				std = true
			}
		}
		if std {
			in = append(in, p)
		}
	}
	cmd = exec.Command("go", append([]string{"list", "-e", "-export", "-deps", "-json=ImportPath,Export,Error"}, in...)...)
	cmd.Dir = m
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	raw, err = cmd.Output()
	if err != nil {
		return nil, fmt.Errorf("go list in %s: %v: %s", m, err, stderr.String())
	}
	out := map[string]string{}
	dec := json.NewDecoder(bytes.NewReader(raw))
	for {
		var p struct {
			ImportPath string
			Export     string
			Error      *struct{ Err string }
		}
		if err := dec.Decode(&p); err == io.EOF {
			break
		} else if err != nil {
			return nil, fmt.Errorf("go list in %s: %w", m, err)
		}
		if p.Error == nil {
			out[p.ImportPath] = p.Export
		}
	}
	return out, nil
}

func typeCheck(b *block, exports map[string]string) {
	fset := token.NewFileSet()
	f, err := parser.ParseFile(fset, "snippet.go", b.src, 0)
	if err != nil {
		report(b.file, b.line, "the snippet does not parse: %v", firstLine(err))
		return
	}
	var errs []string
	conf := types.Config{
		Importer: importer.ForCompiler(fset, "gc", func(path string) (io.ReadCloser, error) {
			if exports[path] == "" {
				return nil, fmt.Errorf("no export data for %s", path)
			}
			return os.Open(exports[path])
		}),
		Error: func(err error) {
			if te, ok := err.(types.Error); ok && te.Soft {
				return // declared and not used, imported and not used
			}
			errs = append(errs, err.Error())
		},
	}
	conf.Check("snippet", fset, []*ast.File{f}, nil)
	if len(errs) > 0 {
		if os.Getenv("SNIPPET_DEBUG") != "" {
			fmt.Fprintf(os.Stderr, "--- %s:%d\n%s\n", b.file, b.line, b.src)
		}
		// Lines of the generated file do not match the page's; the
		// message names what is wrong.
		msg := strings.Join(trimPos(errs), "; ")
		msg = strings.Join(strings.Fields(msg), " ")
		report(b.file, b.line, "the snippet does not compile: %s", msg)
	}
}

var posPattern = regexp.MustCompile(`^snippet\.go:\d+:\d+: `)

func trimPos(errs []string) []string {
	out := make([]string, len(errs))
	for i, e := range errs {
		out[i] = posPattern.ReplaceAllString(e, "")
	}
	return out
}
