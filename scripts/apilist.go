//go:build ignore

// apilist prints the exported API of the packages users import, one
// feature a line, in the style of the Go project's api/go1.*.txt (cmd/api):
//
//	pkg github.com/fencing-go/fencing/backend, func CheckRequest(...) error
//	pkg github.com/fencing-go/fencing/backend, type Backend interface, Grant(...) (...)
//	pkg github.com/fencing-go/fencing, method (*Coordinator) Lock(...) (...)
//
// scripts/check-api.sh runs it and compares its output with the committed
// description in api/: a line that went away is an incompatible change (a
// name removed, or its signature, type, value or method set changed); a
// new line is an addition.
//
//	go run scripts/apilist.go DIR
//
// writes one file per package under DIR (api/fencing.txt for the root
// package, api/<path>.txt for the others). The packages are every package
// of the library's modules (the root module, kubebackend, natsbackend) that is
// neither a command (package main) nor internal, examples or scripts.
//
// It reads the compiler's export data (go list -export), so it sees what a
// user's compiler sees, and needs nothing outside the standard library.
package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"go/importer"
	"go/token"
	"go/types"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
)

// modules are the library's Go modules, relative to the repository's root.
var modules = []string{".", "kubebackend", "natsbackend"}

const rootPath = "github.com/fencing-go/fencing"

type listed struct {
	ImportPath string
	Name       string
	Export     string
	DepOnly    bool
	Standard   bool
}

func main() {
	if len(os.Args) != 2 {
		fmt.Fprintln(os.Stderr, "usage: go run scripts/apilist.go DIR")
		os.Exit(2)
	}
	out := os.Args[1]
	files := map[string][]string{}
	for _, m := range modules {
		if err := listModule(m, files); err != nil {
			fmt.Fprintln(os.Stderr, "apilist:", err)
			os.Exit(1)
		}
	}
	for name, lines := range files {
		path := filepath.Join(out, name)
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			fmt.Fprintln(os.Stderr, "apilist:", err)
			os.Exit(1)
		}
		if err := os.WriteFile(path, []byte(strings.Join(lines, "\n")+"\n"), 0o644); err != nil {
			fmt.Fprintln(os.Stderr, "apilist:", err)
			os.Exit(1)
		}
	}
}

// listModule lists the API of module m's packages into files.
func listModule(m string, files map[string][]string) error {
	// First the packages, without compiling anything; then the export data
	// of those users import and of their dependencies only, so that a
	// package that no longer compiles against them (an example, a test
	// helper) does not stop the listing.
	cmd := exec.Command("go", "list", "-f", "{{.ImportPath}} {{.Name}} {{.Standard}}", "./...")
	cmd.Dir = m
	cmd.Stderr = os.Stderr
	raw, err := cmd.Output()
	if err != nil {
		return fmt.Errorf("go list in %s: %w", m, err)
	}
	var paths []string
	for _, line := range strings.Split(strings.TrimSpace(string(raw)), "\n") {
		f := strings.Fields(line)
		if len(f) == 3 && public(listed{ImportPath: f[0], Name: f[1], Standard: f[2] == "true"}) {
			paths = append(paths, f[0])
		}
	}
	cmd = exec.Command("go", append([]string{"list", "-export", "-deps", "-json=ImportPath,Name,Export,DepOnly,Standard"}, paths...)...)
	cmd.Dir = m
	cmd.Stderr = os.Stderr
	raw, err = cmd.Output()
	if err != nil {
		return fmt.Errorf("go list -export in %s: %w", m, err)
	}
	exports := map[string]string{}
	var mine []listed
	dec := json.NewDecoder(bytes.NewReader(raw))
	for {
		var p listed
		if err := dec.Decode(&p); err == io.EOF {
			break
		} else if err != nil {
			return fmt.Errorf("go list in %s: %w", m, err)
		}
		exports[p.ImportPath] = p.Export
		if !p.DepOnly && public(p) {
			mine = append(mine, p)
		}
	}
	fset := token.NewFileSet()
	imp := importer.ForCompiler(fset, "gc", func(path string) (io.ReadCloser, error) {
		f, ok := exports[path]
		if !ok || f == "" {
			return nil, fmt.Errorf("no export data for %s", path)
		}
		return os.Open(f)
	})
	for _, p := range mine {
		pkg, err := imp.Import(p.ImportPath)
		if err != nil {
			return fmt.Errorf("import %s: %w", p.ImportPath, err)
		}
		name := "fencing"
		if p.ImportPath != rootPath {
			name = strings.TrimPrefix(p.ImportPath, rootPath+"/")
		}
		files[name+".txt"] = features(pkg)
	}
	return nil
}

// public reports whether p is a package users import.
func public(p listed) bool {
	if p.Name == "main" || p.Standard {
		return false
	}
	if p.ImportPath != rootPath && !strings.HasPrefix(p.ImportPath, rootPath+"/") {
		return false
	}
	for _, part := range strings.Split(strings.TrimPrefix(p.ImportPath, rootPath), "/") {
		if part == "internal" || part == "examples" || part == "scripts" || part == "testimages" {
			return false
		}
	}
	return true
}

// features returns pkg's exported API, one sorted line a feature.
func features(pkg *types.Package) []string {
	qual := func(p *types.Package) string {
		if p == pkg {
			return ""
		}
		return p.Path()
	}
	ts := func(t types.Type) string { return types.TypeString(unnamed(t), qual) }
	var lines []string
	add := func(format string, args ...any) {
		lines = append(lines, "pkg "+pkg.Path()+", "+fmt.Sprintf(format, args...))
	}
	scope := pkg.Scope()
	for _, name := range scope.Names() {
		obj := scope.Lookup(name)
		if !obj.Exported() {
			continue
		}
		switch obj := obj.(type) {
		case *types.Const:
			add("const %s %s = %s", name, ts(obj.Type()), obj.Val().ExactString())
		case *types.Var:
			add("var %s %s", name, ts(obj.Type()))
		case *types.Func:
			add("func %s%s", name, strings.TrimPrefix(ts(obj.Type()), "func"))
		case *types.TypeName:
			typeFeatures(obj, ts, add)
		}
	}
	sort.Strings(lines)
	return lines
}

// typeFeatures adds the lines of the exported type obj: its kind or
// underlying type, its exported fields, its method set.
func typeFeatures(obj *types.TypeName, ts func(types.Type) string, add func(string, ...any)) {
	name := obj.Name()
	if obj.IsAlias() {
		rhs := obj.Type()
		if a, ok := rhs.(*types.Alias); ok {
			rhs = a.Rhs()
		}
		add("type %s = %s", name, ts(rhs))
		return
	}
	named := obj.Type().(*types.Named)
	decl := name
	if tps := named.TypeParams(); tps.Len() > 0 {
		var ps []string
		for i := range tps.Len() {
			tp := tps.At(i)
			ps = append(ps, tp.Obj().Name()+" "+ts(tp.Constraint()))
		}
		decl += "[" + strings.Join(ps, ", ") + "]"
	}
	switch u := named.Underlying().(type) {
	case *types.Struct:
		add("type %s struct", decl)
		for i := range u.NumFields() {
			f := u.Field(i)
			if !f.Exported() {
				continue
			}
			if f.Embedded() {
				add("type %s struct, embedded %s", name, ts(f.Type()))
			} else {
				add("type %s struct, %s %s", name, f.Name(), ts(f.Type()))
			}
		}
	case *types.Interface:
		// The whole method list on one line as well: adding a method to
		// an interface breaks its implementations.
		var ms []string
		for i := range u.NumMethods() {
			m := u.Method(i)
			if m.Exported() {
				ms = append(ms, m.Name())
			} else {
				ms = append(ms, "unexported methods")
			}
		}
		sort.Strings(ms)
		ms = dedup(ms)
		add("type %s interface { %s }", decl, strings.Join(ms, ", "))
		for i := range u.NumMethods() {
			m := u.Method(i)
			if m.Exported() {
				add("type %s interface, %s%s", name, m.Name(), strings.TrimPrefix(ts(m.Type()), "func"))
			}
		}
		if u.IsMethodSet() {
			return
		}
		add("type %s interface, constraint %s", name, ts(u))
		return
	default:
		add("type %s %s", decl, ts(u))
	}
	// The method set of *T, promoted methods included; (T) for those the
	// value has too.
	value := types.NewMethodSet(named)
	ptr := types.NewMethodSet(types.NewPointer(named))
	for i := range ptr.Len() {
		m := ptr.At(i).Obj().(*types.Func)
		if !m.Exported() {
			continue
		}
		recv := "*" + name
		if value.Lookup(m.Pkg(), m.Name()) != nil {
			recv = name
		}
		add("method (%s) %s%s", recv, m.Name(), strings.TrimPrefix(ts(m.Type()), "func"))
	}
}

func dedup(s []string) []string {
	var out []string
	for i, v := range s {
		if i == 0 || v != s[i-1] {
			out = append(out, v)
		}
	}
	return out
}

// unnamed returns t with the names of a signature's parameters and results
// dropped: renaming a parameter breaks no caller.
func unnamed(t types.Type) types.Type {
	sig, ok := t.(*types.Signature)
	if !ok {
		return t
	}
	strip := func(tup *types.Tuple) *types.Tuple {
		vars := make([]*types.Var, tup.Len())
		for i := range tup.Len() {
			vars[i] = types.NewParam(token.NoPos, nil, "", unnamed(tup.At(i).Type()))
		}
		return types.NewTuple(vars...)
	}
	return types.NewSignatureType(nil, nil, nil, strip(sig.Params()), strip(sig.Results()), sig.Variadic())
}
