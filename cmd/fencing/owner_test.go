package main

import (
	"encoding/json"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"
)

func TestOwner(t *testing.T) {
	onServers(t, func(t *testing.T, s server) {
		w := start(t, s.args("watch", "owner/", "--prefix", "--interval", "50ms", "--json")...)
		var l leaseJSON
		wantJSON(t, &l, s.args("grant", "owner/a", "--ttl", "30s", "--owner", "job-runner:7 ключ", "--json")...)
		var st stateJSON
		wantJSON(t, &st, s.args("get", "owner/a", "--json")...)
		if !st.Live || st.Token != l.Token || st.Owner != "job-runner:7 ключ" {
			t.Errorf("get --json after grant --owner: %+v", st)
		}
		if r := want(t, 0, s.args("get", "owner/a")...); !strings.Contains(r.stdout, "owner:") || !strings.Contains(r.stdout, "job-runner:7 ключ") {
			t.Errorf("get does not show the owner:\n%s", r.stdout)
		}
		for {
			var e eventJSON
			line := w.line(30 * time.Second)
			if err := json.Unmarshal([]byte(line), &e); err != nil {
				t.Fatalf("watch printed %q: %v", line, err)
			}
			if e.Key == "owner/a" && (e.Event == "granted" || e.Event == "live") {
				if e.Owner != "job-runner:7 ключ" {
					t.Errorf("watch: granted event %+v, want the owner", e)
				}
				break
			}
		}

		// hold's default owner is its host name and PID.
		p := start(t, s.args("hold", "owner/b", "--ttl", "30s", "--", "sh", "-c", "echo ready; exec sleep 60")...)
		p.line(30 * time.Second)
		host, _ := os.Hostname()
		wantOwner := fmt.Sprintf("%s/pid %d", host, p.cmd.Process.Pid)
		var ll listJSON
		wantJSON(t, &ll, s.args("list", "owner/", "--json")...)
		owners := map[string]string{}
		for _, k := range ll.Keys {
			owners[k.Key] = k.Owner
		}
		if owners["owner/a"] != "job-runner:7 ключ" || owners["owner/b"] != wantOwner {
			t.Errorf("list --json owners %q, want owner/a's given one and owner/b %q", owners, wantOwner)
		}
		if r := want(t, 0, s.args("list", "owner/")...); !strings.Contains(r.stdout, "OWNER") || !strings.Contains(r.stdout, wantOwner) {
			t.Errorf("list does not show the owners:\n%s", r.stdout)
		}
		p.cmd.Process.Signal(os.Interrupt)
		p.wait(30 * time.Second)
		st = stateJSON{}
		wantJSON(t, &st, s.args("get", "owner/b", "--json")...)
		if st.Live || st.Owner != "" {
			t.Errorf("get after hold ended: %+v, want free without an owner", st)
		}

		// No owner, and bad owners.
		wantJSON(t, &l, s.args("grant", "owner/c", "--ttl", "30s", "--owner", "", "--json")...)
		st = stateJSON{}
		wantJSON(t, &st, s.args("get", "owner/c", "--json")...)
		if !st.Live || st.Owner != "" {
			t.Errorf("get after grant --owner '': %+v, want live without an owner", st)
		}
		want(t, exitUsage, s.args("grant", "owner/d", "--ttl", "30s", "--owner", strings.Repeat("x", 257))...)
		want(t, exitUsage, s.args("hold", "owner/d", "--ttl", "30s", "--owner", "a\nb", "--", "true")...)
		wantJSON(t, &st, s.args("get", "owner/d", "--json")...)
		if st.MaxToken != 0 {
			t.Errorf("a bad owner leased the key: %+v", st)
		}
	})
}
