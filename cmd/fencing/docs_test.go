package main

import (
	"os"
	"reflect"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
	"testing"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/fencing-go/fencing/backend"
	"github.com/fencing-go/fencing/etcdbackend"
	"github.com/fencing-go/fencing/kubebackend"
	"github.com/fencing-go/fencing/memorybackend"
	"github.com/fencing-go/fencing/natsbackend"
	"github.com/fencing-go/fencing/redisbackend"
	"github.com/fencing-go/fencing/sqlbackend"
)

// The tests of this file hold docs/cli.md to the commands' own
// definitions: the flags, the exit codes, the backends.

// cliDoc returns docs/cli.md.
func cliDoc(t *testing.T) string {
	t.Helper()
	b, err := os.ReadFile("../../docs/cli.md")
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// stores are the backends --backend chooses: the name the docs and the
// help give the store, the backend's type, and whether the store can refuse
// a login or a permission (exit 6).
var stores = []struct {
	kind, name string
	typ        reflect.Type
	auth       bool
}{
	{"sqlite", "SQLite", reflect.TypeFor[*sqlbackend.Backend](), false},
	{"postgres", "PostgreSQL", reflect.TypeFor[*sqlbackend.Backend](), true},
	{"mysql", "MySQL", reflect.TypeFor[*sqlbackend.Backend](), true},
	{"memory", "memory", reflect.TypeFor[*memorybackend.Backend](), false},
	{"etcd", "etcd", reflect.TypeFor[*etcdbackend.Backend](), true},
	{"redis", "Redis", reflect.TypeFor[*redisbackend.Backend](), true},
	{"kube", "Kubernetes", reflect.TypeFor[*kubebackend.Backend](), true},
	{"nats", "NATS", reflect.TypeFor[*natsbackend.Backend](), true},
}

// TestDocsStores: the stores the code opens are the ones listed above, and
// fencing --help and --backend's help name each.
func TestDocsStores(t *testing.T) {
	var kinds []string
	for _, s := range stores {
		kinds = append(kinds, s.kind)
	}
	if !slices.Equal(kinds, backendKinds) {
		t.Fatalf("the stores of this test %q are not the backends the command opens %q", kinds, backendKinds)
	}
	root := rootCommand()
	for _, s := range stores {
		if !strings.Contains(root.Long, s.name) {
			t.Errorf("fencing --help does not name %s", s.name)
		}
		if !regexp.MustCompile(`\b` + s.kind + `\b`).MatchString(root.Long) {
			t.Errorf("fencing --help's list of --backend values lacks %s", s.kind)
		}
	}
}

// allFlags returns the flags of every command, by name.
func allFlags(cmd *cobra.Command, into map[string][]string) {
	add := func(f *pflag.Flag) {
		if !slices.Contains(into[f.Name], cmd.CommandPath()) {
			into[f.Name] = append(into[f.Name], cmd.CommandPath())
		}
	}
	cmd.Flags().VisitAll(add)
	cmd.PersistentFlags().VisitAll(add)
	for _, c := range cmd.Commands() {
		allFlags(c, into)
	}
}

// TestDocsFlags: every --flag docs/cli.md names is a flag of a command, and
// every flag of every command is in docs/cli.md.
func TestDocsFlags(t *testing.T) {
	doc := cliDoc(t)
	flags := map[string][]string{}
	allFlags(rootCommand(), flags)
	flags["help"] = []string{"every command"} // cobra adds it as it runs
	// The flags the text names, and those of fencing's command lines in
	// code blocks: not those of the other programs the examples run
	// (hold's command, after "--").
	named := map[string]bool{}
	flagPattern := regexp.MustCompile("(?:^|[\\s`(\\[|,/])--([a-z][a-z0-9-]*)")
	code := false
	for _, line := range strings.Split(doc, "\n") {
		if strings.HasPrefix(line, "```") {
			code = !code
			continue
		}
		if code {
			if !strings.HasPrefix(strings.TrimLeft(line, "$ "), "fencing ") {
				continue
			}
			line, _, _ = strings.Cut(line, " -- ")
		}
		for _, m := range flagPattern.FindAllStringSubmatch(line, -1) {
			named[m[1]] = true
		}
	}
	var unknown, missing []string
	for n := range named {
		if flags[n] == nil {
			unknown = append(unknown, "--"+n)
		}
	}
	for n, cmds := range flags {
		if n != "help" && !named[n] {
			missing = append(missing, "--"+n+" ("+strings.Join(cmds, ", ")+")")
		}
	}
	sort.Strings(unknown)
	sort.Strings(missing)
	if len(unknown) > 0 {
		t.Errorf("docs/cli.md names flags no command has: %s", strings.Join(unknown, ", "))
	}
	if len(missing) > 0 {
		t.Errorf("docs/cli.md does not name these flags: %s", strings.Join(missing, ", "))
	}
}

// exitRows returns the rows of docs/cli.md's exit code table, by code.
func exitRows(t *testing.T, doc string) map[string]string {
	t.Helper()
	_, table, ok := strings.Cut(doc, "## Exit codes")
	if !ok {
		t.Fatal("docs/cli.md has no section Exit codes")
	}
	table, _, _ = strings.Cut(table, "\n## ")
	rows := map[string]string{}
	for _, m := range regexp.MustCompile(`(?m)^\| (\d+|any) \| (.*) \|$`).FindAllStringSubmatch(table, -1) {
		rows[m[1]] = m[2]
	}
	return rows
}

// TestDocsExitCodes: docs/cli.md's table and fencing --help give the exit
// codes the command uses, and the row of exit 6 names every store that can
// refuse a login.
func TestDocsExitCodes(t *testing.T) {
	codes := []int{exitOK, exitError, exitUsage, exitHeld, exitLost, exitUnreachable, exitAuth}
	rows := exitRows(t, cliDoc(t))
	help := rootCommand().Long
	_, helpCodes, _ := strings.Cut(help, "Exit codes:")
	for _, c := range codes {
		n := strconv.Itoa(c)
		if _, ok := rows[n]; !ok {
			t.Errorf("docs/cli.md's exit code table has no row for %d", c)
		}
		if !regexp.MustCompile(`\b` + n + ` \w`).MatchString(helpCodes) {
			t.Errorf("fencing --help's exit codes do not give %d", c)
		}
		delete(rows, n)
	}
	delete(rows, "any") // hold passes on its command's code
	for n := range rows {
		t.Errorf("docs/cli.md's exit code table has a row for %s, which the command does not use", n)
	}
	rows = exitRows(t, cliDoc(t))
	for _, s := range stores {
		if s.auth && !strings.Contains(rows[strconv.Itoa(exitAuth)], s.name) {
			t.Errorf("docs/cli.md's row for exit %d does not name %s, which can refuse a login or a permission", exitAuth, s.name)
		}
	}
}

// TestDocsTopWaiters: docs/cli.md's top section names as showing "?"
// waiters exactly the stores whose backend cannot count a key's line.
func TestDocsTopWaiters(t *testing.T) {
	m := regexp.MustCompile(`"\?" where the backend cannot count them: ([^)]*)\)`).FindStringSubmatch(cliDoc(t))
	if m == nil {
		t.Fatal(`docs/cli.md's top section does not say where top shows "?" waiters ("?" where the backend cannot count them: ...)`)
	}
	lineReader := reflect.TypeFor[backend.LineReader]()
	for _, s := range stores {
		counts := s.typ.Implements(lineReader)
		named := strings.Contains(m[1], s.name)
		if counts && named {
			t.Errorf("docs/cli.md says top shows \"?\" waiters on %s, whose backend counts them (backend.LineReader)", s.name)
		}
		if !counts && !named {
			t.Errorf("docs/cli.md does not say top shows \"?\" waiters on %s, whose backend cannot count them", s.name)
		}
	}
}
