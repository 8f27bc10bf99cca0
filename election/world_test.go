package election_test

import (
	"github.com/fencing-go/fencing"
	"github.com/fencing-go/fencing/internal/testing/recipetest"
)

type world = recipetest.World

var worlds = recipetest.Each

// holdOpts are the candidates' options: a fast fallback poll, so that a
// waiter on the memory world, whose expiry is never announced, sees it
// soon after the fake clock moves.
func holdOpts() []fencing.LockOption {
	return []fencing.LockOption{fencing.WithPollInterval(fencing.MinPollInterval)}
}
