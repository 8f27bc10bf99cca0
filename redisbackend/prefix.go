package redisbackend

import (
	"fmt"
	"strings"
)

// checkPrefix refuses a prefix that would split a key's Redis keys across
// Cluster slots. Each key's hash and channel carry the hash tag
// {base64url(key)}, so the scripts may touch both; but Redis hashes from the
// first '{' of the whole name, and when that brace is the prefix's and is
// followed at once by '}' (an empty tag) Redis hashes the whole name, which
// differs between the hash and the channel.
func checkPrefix(prefix string) error {
	if _, after, ok := strings.Cut(prefix, "{"); ok && strings.HasPrefix(after, "}") {
		return fmt.Errorf("%w: the prefix's first '{' is followed by '}' (an empty hash tag would put a key's hash and channel in different Cluster slots)", ErrInvalidOption)
	}
	return nil
}
