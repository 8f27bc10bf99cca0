package natsbackend

import (
	"errors"
	"fmt"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/fencing-go/fencing/backend"
)

// conflict reports whether err is a compare-and-swap that lost: the entry
// changed since it was read (or exists, for a create). Nothing was written.
func conflict(err error) bool {
	return errors.Is(err, jetstream.ErrKeyRevisionMismatch) || errors.Is(err, jetstream.ErrKeyExists)
}

// writeErr classifies the error of a write that may have been sent. The
// server's refusals (an API error) are verdicts: nothing was stored. A
// closed connection or no stream to answer never stored it either.
// Everything else (a timeout, the context ending while the publish was out,
// a reconnect with the publish in the client's buffer) leaves the outcome
// unknown: the write may be stored, and a resend with the same lease ID
// settles it.
func writeErr(what string, err error) error {
	var api *jetstream.APIError
	switch {
	case errors.Is(err, nats.ErrConnectionClosed), errors.Is(err, jetstream.ErrNoStreamResponse),
		errors.Is(err, nats.ErrNoResponders), errors.As(err, &api):
		return fmt.Errorf("natsbackend: %s: %w", what, err)
	}
	return fmt.Errorf("natsbackend: %s: %w: %w", what, backend.ErrOutcomeUnknown, err)
}

// readErr wraps the error of a read: a read changes nothing, so its outcome
// is never in doubt.
func readErr(what string, err error) error {
	return fmt.Errorf("natsbackend: %s: %w", what, err)
}
