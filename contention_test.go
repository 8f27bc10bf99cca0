package fencing_test

import (
	"testing"
	"time"

	"github.com/fencing-go/fencing/internal/testing/contentiontest"
	"github.com/fencing-go/fencing/memorybackend"
)

func TestContentionMemory(t *testing.T) {
	b := memorybackend.New()
	defer b.Close()
	contentiontest.Run(t, b, 5*time.Second)
}
