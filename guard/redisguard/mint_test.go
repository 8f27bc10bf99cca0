package redisguard_test

import (
	"testing"

	"github.com/fencing-go/fencing/guard"
	"github.com/fencing-go/fencing/guard/redisguard"
	"github.com/fencing-go/fencing/internal/testing/minttest"
	"github.com/fencing-go/fencing/internal/testing/redistest"
)

func TestMintCheck(t *testing.T) {
	client := redistest.Start(t, redistest.Config{}).Client()
	minttest.Run(t, func(t *testing.T, mc *guard.MintCheck) minttest.Store {
		return redisguard.New(client, redisguard.WithMintCheck(mc))
	})
}

func TestClusterMintCheck(t *testing.T) {
	client := redistest.StartCluster(t, redistest.Config{}).Client(t)
	minttest.Run(t, func(t *testing.T, mc *guard.MintCheck) minttest.Store {
		return redisguard.New(client, redisguard.WithMintCheck(mc))
	})
}
