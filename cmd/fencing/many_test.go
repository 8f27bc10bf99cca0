package main

import (
	"os"
	"strings"
	"testing"
	"time"
)

// hold with several keys takes them together, gives the command every key
// and token, and frees them all when it exits.
func TestHoldMany(t *testing.T) {
	onServers(t, func(t *testing.T, s server) {
		p := start(t, s.args("hold", "many/b", "many/a", "many/c", "--ttl", "30s", "--",
			"sh", "-c", "env | grep ^FENCING_ | sort; echo ready; exec sleep 60")...)
		env := map[string]string{}
		for {
			line := p.line(30 * time.Second)
			if line == "ready" {
				break
			}
			k, v, _ := strings.Cut(line, "=")
			env[k] = v
		}
		if env["FENCING_KEYS"] != "3" || env["FENCING_KEY_1"] != "many/b" || env["FENCING_KEY_3"] != "many/c" ||
			env["FENCING_TOKEN_1"] == "" || env["FENCING_TOKEN_2"] == "" || env["FENCING_TOKEN_3"] == "" {
			t.Errorf("the command's environment: %v; want FENCING_KEYS=3 and each key and token in the order given", env)
		}
		for _, k := range []string{"many/a", "many/b", "many/c"} {
			var st stateJSON
			wantJSON(t, &st, s.args("get", k, "--json")...)
			if !st.Live {
				t.Errorf("%s not live while hold runs: %+v", k, st)
			}
		}
		// One of the keys held: a second hold of an overlapping set takes none.
		want(t, exitHeld, s.args("hold", "many/c", "many/d", "--ttl", "30s", "--", "true")...)
		var st stateJSON
		wantJSON(t, &st, s.args("get", "many/d", "--json")...)
		if st.Live {
			t.Errorf("many/d taken by a refused hold: %+v", st)
		}
		p.cmd.Process.Signal(os.Interrupt)
		p.wait(30 * time.Second)
		for _, k := range []string{"many/a", "many/b", "many/c"} {
			var st stateJSON
			wantJSON(t, &st, s.args("get", k, "--json")...)
			if st.Live {
				t.Errorf("%s live after hold exited: %+v", k, st)
			}
		}
	})
}
