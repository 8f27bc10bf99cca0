//go:build ignore

// check-docs finds drift between the docs and the code. Run it from the
// repository's root (scripts/check-docs.sh does, and .ci/run calls that):
//
//	go run scripts/check-docs.go scripts/check-snippets.go
//
// It checks that
//
//   - every relative link in README.md and docs/*.md, [text](path) or
//     [text](path#anchor) or [text](#anchor), names a file that exists, and
//     an anchor one of that page's headings makes (GitHub's rule: lower
//     case, punctuation dropped, spaces to hyphens, -1, -2... for repeats);
//   - every docs/*.md page that a Go comment or string names exists;
//   - every exported name README.md writes as pkg.Name or pkg.Type.Member,
//     where pkg is the name of one of this module's packages, is declared
//     in that package (a top-level func, type, const or var, or a method or
//     struct field of the type), as go doc would show it;
//   - no README.md or docs/ text carries project history ("issue 12",
//     "not met"): the docs say what the code does;
//   - the package doc (doc.go) names every store, backend/doc.go's
//     "Optional capabilities" every optional capability (an interface of
//     package backend), docs/guards.md's sqlguard paragraph every dialect;
//   - every ```go block of README.md and docs/*.md compiles against the code
//     (scripts/check-snippets.go says how fragments are wrapped).
//
// A name README.md shows before the code that declares it is merged (a
// feature built on another branch) goes in scripts/check-docs-pending.txt,
// one pkg.Name a line; the check then reports it only once it is declared,
// so that the line is deleted.
//
// Each problem is one line, file:line: what is wrong; the exit status is 1
// when there is any.
package main

import (
	"bufio"
	"bytes"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"unicode"
)

// historyPattern is what the docs must not say.
var historyPattern = regexp.MustCompile(`(?i)\bissue [0-9]+\b|not met\b`)

var problems []string

func report(file string, line int, format string, args ...any) {
	problems = append(problems, fmt.Sprintf("%s:%d: %s", file, line, fmt.Sprintf(format, args...)))
}

func main() {
	pages := []string{"README.md"}
	docs, _ := filepath.Glob("docs/*.md")
	pages = append(pages, docs...)

	for _, p := range pages {
		checkLinks(p)
	}
	checkHistory(append([]string{"README.md"}, walk("docs")...))
	checkGoDocRefs()
	checkNames("README.md") // docs/ may name what does not exist (a design not chosen)
	checkLists()
	snippets, skipped := checkSnippets(pages)

	if len(problems) > 0 {
		for _, p := range problems {
			fmt.Println(p)
		}
		fmt.Printf("check-docs: %d problem(s)\n", len(problems))
		os.Exit(1)
	}
	fmt.Printf("check-docs: links, anchors, docs/*.md named by Go files, names in README.md, history words and the lists of stores, capabilities and dialects in %d pages, %d Go snippets compiled (%d skipped with a reason): ok\n", len(pages), snippets, skipped)
}

// lines returns the lines of a file, and which of them are inside fenced
// code blocks.
func lines(file string) (text []string, fenced []bool) {
	b, err := os.ReadFile(file)
	if err != nil {
		report(file, 0, "%v", err)
		return nil, nil
	}
	in := false
	for _, l := range strings.Split(string(b), "\n") {
		if strings.HasPrefix(strings.TrimSpace(l), "```") {
			in = !in
			text, fenced = append(text, l), append(fenced, true)
			continue
		}
		text, fenced = append(text, l), append(fenced, in)
	}
	return text, fenced
}

var (
	linkPattern     = regexp.MustCompile(`\]\(([^()\s]+)\)`)
	codeSpanPattern = regexp.MustCompile("`[^`]*`")
)

// checkLinks checks the relative links of a Markdown page.
func checkLinks(page string) {
	text, fenced := lines(page)
	for i, l := range text {
		if fenced[i] {
			continue
		}
		for _, m := range linkPattern.FindAllStringSubmatch(codeSpanPattern.ReplaceAllString(l, ""), -1) {
			target := m[1]
			if strings.Contains(target, "://") || strings.HasPrefix(target, "mailto:") {
				continue
			}
			path, anchor, _ := strings.Cut(target, "#")
			file := page
			if path != "" {
				file = filepath.Join(filepath.Dir(page), path)
				if _, err := os.Stat(file); err != nil {
					report(page, i+1, "link %s: no file %s", target, file)
					continue
				}
			}
			if anchor != "" && strings.HasSuffix(file, ".md") && !anchors(file)[anchor] {
				report(page, i+1, "link %s: %s has no heading with anchor #%s", target, file, anchor)
			}
		}
	}
}

var anchorCache = map[string]map[string]bool{}

// anchors returns the anchors the headings of a Markdown page make.
func anchors(page string) map[string]bool {
	if a, ok := anchorCache[page]; ok {
		return a
	}
	a := map[string]bool{}
	seen := map[string]int{}
	text, fenced := lines(page)
	for i, l := range text {
		if fenced[i] || !strings.HasPrefix(l, "#") {
			continue
		}
		h := strings.TrimSpace(strings.TrimLeft(l, "#"))
		slug := slugify(h)
		if n := seen[slug]; n > 0 {
			a[fmt.Sprintf("%s-%d", slug, n)] = true
		} else {
			a[slug] = true
		}
		seen[slug]++
	}
	anchorCache[page] = a
	return a
}

var headingLink = regexp.MustCompile(`\[([^\]]*)\]\([^)]*\)`)

// slugify makes a heading's anchor as GitHub does.
func slugify(h string) string {
	h = headingLink.ReplaceAllString(h, "$1")
	var b strings.Builder
	for _, r := range strings.ToLower(h) {
		switch {
		case r == ' ':
			b.WriteRune('-')
		case r == '-' || r == '_' || unicode.IsLetter(r) || unicode.IsDigit(r):
			b.WriteRune(r)
		}
	}
	return b.String()
}

// walk returns the text files under dir.
func walk(dir string) []string {
	var files []string
	filepath.WalkDir(dir, func(p string, d os.DirEntry, err error) error {
		if err == nil && !d.IsDir() && (strings.HasSuffix(p, ".md") || strings.HasSuffix(p, ".txt")) {
			files = append(files, p)
		}
		return nil
	})
	return files
}

// checkHistory reports lines that tell the project's history.
func checkHistory(files []string) {
	for _, f := range files {
		text, _ := lines(f)
		for i, l := range text {
			for _, m := range historyPattern.FindAllString(l, -1) {
				report(f, i+1, "%q: say what the code does, not how the project got there (history goes to git log)", m)
			}
		}
	}
}

var docRef = regexp.MustCompile(`\bdocs/[A-Za-z0-9_.-]+\.md\b`)

// checkGoDocRefs checks that every docs/*.md a Go file names exists.
func checkGoDocRefs() {
	out, err := exec.Command("git", "ls-files", "*.go").Output()
	if err != nil {
		report(".", 0, "git ls-files: %v", err)
		return
	}
	for _, f := range strings.Fields(string(out)) {
		b, err := os.ReadFile(f)
		if err != nil {
			continue // deleted in the work tree
		}
		sc := bufio.NewScanner(bytes.NewReader(b))
		sc.Buffer(nil, 1<<20)
		for n := 1; sc.Scan(); n++ {
			for _, ref := range docRef.FindAllString(sc.Text(), -1) {
				if _, err := os.Stat(ref); err != nil {
					report(f, n, "names %s, which does not exist", ref)
				}
			}
		}
	}
}

// pkgDecls is what a package declares: top-level exported names and, per
// type, its methods and fields.
type pkgDecls struct {
	dir     string
	names   map[string]bool
	members map[string]map[string]bool
}

// modulePackages returns this module's packages by package name (a name
// used by several packages maps to all of them).
func modulePackages() map[string][]*pkgDecls {
	out, err := exec.Command("go", "list", "-f", "{{.Name}} {{.Dir}}", "./...").Output()
	if err != nil {
		report(".", 0, "go list ./...: %v", err)
		return nil
	}
	pkgs := map[string][]*pkgDecls{}
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		name, dir, ok := strings.Cut(line, " ")
		if !ok || name == "main" {
			continue
		}
		pkgs[name] = append(pkgs[name], parseDecls(dir))
	}
	return pkgs
}

func parseDecls(dir string) *pkgDecls {
	d := &pkgDecls{dir: dir, names: map[string]bool{}, members: map[string]map[string]bool{}}
	member := func(typ, name string) {
		if d.members[typ] == nil {
			d.members[typ] = map[string]bool{}
		}
		d.members[typ][name] = true
	}
	fset := token.NewFileSet()
	files, _ := filepath.Glob(filepath.Join(dir, "*.go"))
	for _, f := range files {
		if strings.HasSuffix(f, "_test.go") {
			continue
		}
		file, err := parser.ParseFile(fset, f, nil, parser.SkipObjectResolution)
		if err != nil {
			report(f, 0, "%v", err)
			continue
		}
		for _, decl := range file.Decls {
			switch decl := decl.(type) {
			case *ast.FuncDecl:
				if decl.Recv == nil {
					d.names[decl.Name.Name] = true
					continue
				}
				t := decl.Recv.List[0].Type
				if s, ok := t.(*ast.StarExpr); ok {
					t = s.X
				}
				if ix, ok := t.(*ast.IndexExpr); ok {
					t = ix.X
				}
				if id, ok := t.(*ast.Ident); ok {
					member(id.Name, decl.Name.Name)
				}
			case *ast.GenDecl:
				for _, spec := range decl.Specs {
					switch spec := spec.(type) {
					case *ast.TypeSpec:
						d.names[spec.Name.Name] = true
						switch t := spec.Type.(type) {
						case *ast.StructType:
							for _, f := range t.Fields.List {
								for _, n := range f.Names {
									member(spec.Name.Name, n.Name)
								}
								if len(f.Names) == 0 { // embedded
									e := f.Type
									if s, ok := e.(*ast.StarExpr); ok {
										e = s.X
									}
									if sel, ok := e.(*ast.SelectorExpr); ok {
										member(spec.Name.Name, sel.Sel.Name)
									} else if id, ok := e.(*ast.Ident); ok {
										member(spec.Name.Name, id.Name)
									}
								}
							}
						case *ast.InterfaceType:
							for _, m := range t.Methods.List {
								for _, n := range m.Names {
									member(spec.Name.Name, n.Name)
								}
							}
						}
					case *ast.ValueSpec:
						for _, n := range spec.Names {
							d.names[n.Name] = true
						}
					}
				}
			}
		}
	}
	return d
}

var qualified = regexp.MustCompile(`\b([a-z][a-z0-9]*)\.([A-Z][A-Za-z0-9_]*)(?:\.([A-Z][A-Za-z0-9_]*))?`)

// checkNames checks that each pkg.Name a page writes is declared.
func checkNames(page string) {
	pkgs := modulePackages()
	pending := readPending()
	text, _ := lines(page)
	for i, l := range text {
		for _, m := range qualified.FindAllStringSubmatch(l, -1) {
			cands, ok := pkgs[m[1]]
			if !ok {
				continue
			}
			if !declared(cands, m[2], m[3]) {
				if pending[m[0]] {
					continue
				}
				dirs := make([]string, len(cands))
				for j, c := range cands {
					dirs[j] = "./" + relDir(c.dir)
				}
				sort.Strings(dirs)
				report(page, i+1, "%s: not declared in package %s (%s); a name of a branch not merged yet goes in %s", m[0], m[1], strings.Join(dirs, ", "), pendingFile)
			} else if pending[m[0]] {
				report(pendingFile, 0, "%s is declared now: delete its line", m[0])
				delete(pending, m[0])
			}
		}
	}
}

// pendingFile lists names README.md may show before their code is merged.
const pendingFile = "scripts/check-docs-pending.txt"

// readPending reads pendingFile: one pkg.Name a line; # starts a comment.
func readPending() map[string]bool {
	pending := map[string]bool{}
	b, err := os.ReadFile(pendingFile)
	if err != nil {
		return pending
	}
	for _, l := range strings.Split(string(b), "\n") {
		l, _, _ = strings.Cut(l, "#")
		if l = strings.TrimSpace(l); l != "" {
			pending[l] = true
		}
	}
	return pending
}

func relDir(dir string) string {
	wd, _ := os.Getwd()
	r, err := filepath.Rel(wd, dir)
	if err != nil || r == "." {
		return ""
	}
	return r
}

func declared(cands []*pkgDecls, name, member string) bool {
	for _, c := range cands {
		if !c.names[name] {
			continue
		}
		if member == "" || c.members[name][member] {
			return true
		}
	}
	return false
}

// storeNames are the names the docs give each backend's store, by package;
// dialectNames those of the SQL dialects (sqlbackend's and sqlguard's
// Dialect variables), by variable.
var (
	storeNames   = map[string]string{"memorybackend": "memory", "etcdbackend": "etcd", "redisbackend": "Redis", "kubebackend": "Kubernetes", "natsbackend": "NATS"}
	dialectNames = map[string]string{"Postgres": "PostgreSQL", "MySQL": "MySQL", "SQLite": "SQLite"}
)

// checkLists checks the lists the docs keep of what the code has: the
// package doc (doc.go) names every store, backend/doc.go every optional
// capability, docs/guards.md every dialect of sqlguard.
func checkLists() {
	var stores []string
	dirs, _ := filepath.Glob("?*backend")
	for _, d := range dirs {
		if d == "sqlbackend" {
			continue
		}
		if name, ok := storeNames[d]; ok {
			stores = append(stores, name)
		} else {
			report("scripts/check-docs.go", 0, "storeNames has no name for package %s", d)
		}
	}
	for _, v := range dialects("sqlbackend") {
		stores = append(stores, dialectNames[v])
	}
	doc := packageDoc(".")
	for _, s := range stores {
		if !strings.Contains(doc, s) {
			report("doc.go", 1, "the package doc does not name the store %s", s)
		}
	}

	// Every exported interface of package backend but Backend and
	// Subscription (what Notifier returns) is an optional capability.
	_, para, _ := strings.Cut(packageDoc("backend"), "Optional capabilities")
	para, _, _ = strings.Cut(para, "\n\n")
	for _, name := range interfaces("backend") {
		if name != "Backend" && name != "Subscription" && !regexp.MustCompile(`\b`+name+`\b`).MatchString(para) {
			report("backend/doc.go", 1, "the paragraph \"Optional capabilities\" does not name %s", name)
		}
	}

	text, _ := lines("docs/guards.md")
	for i, l := range text {
		if strings.Contains(l, "(`guard/sqlguard`") {
			for _, v := range dialects("guard/sqlguard") {
				if !strings.Contains(l, dialectNames[v]) {
					report("docs/guards.md", i+1, "sqlguard's paragraph does not name the dialect %s", dialectNames[v])
				}
			}
		}
	}
}

// parseDir parses the non-test Go files of dir, with comments.
func parseDir(dir string) []*ast.File {
	files, _ := filepath.Glob(filepath.Join(dir, "*.go"))
	var out []*ast.File
	for _, f := range files {
		if strings.HasSuffix(f, "_test.go") {
			continue
		}
		af, err := parser.ParseFile(token.NewFileSet(), f, nil, parser.ParseComments)
		if err != nil {
			report(f, 0, "%v", err)
			continue
		}
		out = append(out, af)
	}
	return out
}

// packageDoc returns the package comment of the package in dir.
func packageDoc(dir string) string {
	for _, f := range parseDir(dir) {
		if f.Doc != nil {
			return f.Doc.Text()
		}
	}
	return ""
}

// interfaces returns the exported interface types of the package in dir.
func interfaces(dir string) []string {
	var out []string
	for _, f := range parseDir(dir) {
		for _, d := range f.Decls {
			if g, ok := d.(*ast.GenDecl); ok {
				for _, s := range g.Specs {
					if ts, ok := s.(*ast.TypeSpec); ok && ts.Name.IsExported() {
						if _, ok := ts.Type.(*ast.InterfaceType); ok {
							out = append(out, ts.Name.Name)
						}
					}
				}
			}
		}
	}
	return out
}

// dialects returns the exported variables of the package in dir set to a
// Dialect literal.
func dialects(dir string) []string {
	var out []string
	for _, f := range parseDir(dir) {
		for _, d := range f.Decls {
			g, ok := d.(*ast.GenDecl)
			if !ok {
				continue
			}
			for _, s := range g.Specs {
				vs, ok := s.(*ast.ValueSpec)
				if !ok {
					continue
				}
				for i, v := range vs.Values {
					if cl, ok := v.(*ast.CompositeLit); ok && i < len(vs.Names) && vs.Names[i].IsExported() {
						if id, ok := cl.Type.(*ast.Ident); ok && id.Name == "Dialect" {
							if _, known := dialectNames[vs.Names[i].Name]; !known {
								report("scripts/check-docs.go", 0, "dialectNames has no name for %s.%s", dir, vs.Names[i].Name)
							}
							out = append(out, vs.Names[i].Name)
						}
					}
				}
			}
		}
	}
	return out
}
