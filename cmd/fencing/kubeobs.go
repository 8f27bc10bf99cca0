package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"time"
)

// kubeObservations is the kube backend's observation log
// (kubebackend.ObservationLog) of this user on this host: a small JSON file
// in the state directory, read and written under an exclusive lock (flock),
// with each observation on the boot clock (CLOCK_BOOTTIME, with the boot
// ID), so that every fencing process of the host times a Lease from when
// the first of them saw its state. A file of another boot, unreadable or
// damaged is taken as empty: the process then waits a whole lease, as
// without a log. Observations older than a day are dropped.
type kubeObservations struct {
	path  string
	scope string // the API server and namespace: Lease names repeat across clusters
}

// kubeObsFile is the log's content.
type kubeObsFile struct {
	BootID string                   `json:"boot_id"`
	Leases map[string]kubeObsRecord `json:"leases"`
}

// kubeObsRecord is one Lease's state and when it was first seen, in
// nanoseconds of CLOCK_BOOTTIME.
type kubeObsRecord struct {
	RV   string `json:"rv"`
	Seen int64  `json:"seen_boot_ns"`
}

const (
	kubeObsKeep = 24 * time.Hour
	kubeObsMax  = 4096
)

// newKubeObservations returns the log for the Leases of namespace ns on the
// API server at host, in the state directory; nil where there is no
// state directory or no boot clock.
func newKubeObservations(host, ns string) *kubeObservations {
	if _, _, ok := bootClock(); !ok {
		return nil
	}
	dir, err := stateDir()
	if err != nil || os.MkdirAll(dir, 0o700) != nil {
		return nil
	}
	return &kubeObservations{path: filepath.Join(dir, "kube-observed.json"), scope: host + " " + ns + " "}
}

// Seen implements kubebackend.ObservationLog.
func (o *kubeObservations) Seen(name, rv string) (time.Duration, bool) {
	var ago time.Duration
	var ok bool
	o.update(false, func(f *kubeObsFile, now int64) bool {
		if r, found := f.Leases[o.scope+name]; found && r.RV == rv && r.Seen <= now {
			ago, ok = time.Duration(now-r.Seen), true
		}
		return false
	})
	return ago, ok
}

// Saw implements kubebackend.ObservationLog.
func (o *kubeObservations) Saw(name, rv string, ago time.Duration) {
	o.update(true, func(f *kubeObsFile, now int64) bool {
		f.Leases[o.scope+name] = kubeObsRecord{RV: rv, Seen: now - int64(ago)}
		return true
	})
}

// update runs fn on the file's content under the file's lock (exclusive
// when write), and writes the content back when fn says it changed it.
func (o *kubeObservations) update(write bool, fn func(f *kubeObsFile, now int64) bool) {
	fh, err := os.OpenFile(o.path, os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return
	}
	defer fh.Close()
	if err := lockFile(fh, write); err != nil {
		return
	}
	id, now, ok := bootClock()
	if !ok {
		return
	}
	var f kubeObsFile
	if b, err := readAll(fh); err == nil {
		_ = json.Unmarshal(b, &f)
	}
	if f.BootID != id || f.Leases == nil {
		f = kubeObsFile{BootID: id, Leases: make(map[string]kubeObsRecord)}
	}
	if !fn(&f, int64(now)) || !write {
		return
	}
	pruneKubeObs(&f, int64(now))
	b, err := json.Marshal(&f)
	if err != nil {
		return
	}
	if fh.Truncate(0) == nil {
		_, _ = fh.WriteAt(b, 0)
	}
}

// pruneKubeObs drops observations older than kubeObsKeep, then the oldest beyond
// kubeObsMax.
func pruneKubeObs(f *kubeObsFile, now int64) {
	for k, r := range f.Leases {
		if time.Duration(now-r.Seen) > kubeObsKeep {
			delete(f.Leases, k)
		}
	}
	for len(f.Leases) > kubeObsMax {
		oldest, at := "", int64(0)
		for k, r := range f.Leases {
			if oldest == "" || r.Seen < at {
				oldest, at = k, r.Seen
			}
		}
		delete(f.Leases, oldest)
	}
}

func readAll(fh *os.File) ([]byte, error) {
	st, err := fh.Stat()
	if err != nil {
		return nil, err
	}
	b := make([]byte, st.Size())
	n, err := fh.ReadAt(b, 0)
	if n == len(b) {
		err = nil
	}
	return b[:n], err
}
