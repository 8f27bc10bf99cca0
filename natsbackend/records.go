package natsbackend

import (
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"time"
)

// Storage layout. A key's record is one entry of the bucket, under the KV
// key "l." followed by the key in unpadded base64url (a KV key allows
// letters, digits, '-', '_', '=', '/' and dots between tokens; a fencing
// key is any bytes). Its value is the JSON of record. The entry's revision
// (the stream sequence of the message that stored it) names the state.
const keyPrefix = "l."

// kvKey is the KV key of key's record.
func kvKey(key string) string {
	return keyPrefix + base64.RawURLEncoding.EncodeToString([]byte(key))
}

// keyOf is the fencing key a KV key stands for.
func keyOf(k string) (string, bool) {
	if len(k) <= len(keyPrefix) || k[:len(keyPrefix)] != keyPrefix {
		return "", false
	}
	raw, err := base64.RawURLEncoding.DecodeString(k[len(keyPrefix):])
	return string(raw), err == nil
}

// record is what a key's entry says. Durations are milliseconds.
type record struct {
	// IDHash is the hex SHA-256 of the most recent lease's ID: never the
	// ID, which is a credential, and the bucket is readable by whoever
	// may read it.
	IDHash string `json:"id,omitempty"`
	// Token is the most recent lease's token: the largest the key had.
	Token uint64 `json:"token,omitempty"`
	// Held says the most recent lease was not released (it is live until
	// observed unchanged for TTL).
	Held bool `json:"held,omitempty"`
	// Owner is the grant's owner (backend.Request.Owner).
	Owner string `json:"owner,omitempty"`
	// TTL is ttl + margin: how long an observer must see the entry
	// unchanged before the lease counts as ended.
	TTL int64 `json:"ttl_ms,omitempty"`
	// Margin is the lease's margin, to report it.
	Margin int64 `json:"margin_ms,omitempty"`
	// Delay is the lease's lock delay; after a forced release, the delay
	// the release started.
	Delay int64 `json:"delay_ms,omitempty"`
	// Forced marks a record that ForceRelease ended: its delay runs from
	// when an observer first sees it.
	Forced bool `json:"forced,omitempty"`

	rev uint64 // the entry's revision; 0 for a key with no entry
}

func (r record) ttl() time.Duration    { return time.Duration(r.TTL) * time.Millisecond }
func (r record) margin() time.Duration { return time.Duration(r.Margin) * time.Millisecond }
func (r record) delay() time.Duration  { return time.Duration(r.Delay) * time.Millisecond }

func hashID(id string) string {
	sum := sha256.Sum256([]byte(id))
	return hex.EncodeToString(sum[:])
}

// ms is d in whole milliseconds, rounded up.
func ms(d time.Duration) int64 {
	return int64((d + time.Millisecond - 1) / time.Millisecond)
}

// parse reads an entry's value. An empty value (the entry made for a key
// before its first grant) is the zero record.
func parse(data []byte, rev uint64) (record, error) {
	var r record
	if len(data) > 0 {
		if err := json.Unmarshal(data, &r); err != nil {
			return record{}, fmt.Errorf("natsbackend: entry at revision %d is not a fencing record: %w", rev, err)
		}
	}
	r.rev = rev
	return r, nil
}

func (r record) encode() []byte {
	data, err := json.Marshal(r)
	if err != nil {
		panic(err) // a struct of strings, numbers and booleans
	}
	return data
}

// nextToken is the token a grant replacing r mints: the revision of the
// state it replaces, larger than the revision of every earlier state of
// the key and so than every earlier token (each token was written into a
// state whose revision is larger than the token), or one more than the
// stored token if that is larger (an entry written by hand).
func nextToken(r record) uint64 {
	return max(r.rev, r.Token+1)
}
