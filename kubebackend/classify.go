package kubebackend

import (
	"context"
	"errors"
	"fmt"
	"syscall"

	apierrors "k8s.io/apimachinery/pkg/api/errors"

	"github.com/fencing-go/fencing/backend"
)

// writeErr classifies the error of a create or update that may have been
// sent. The API server's refusals (a conflict, a validation error, a
// forbidden request) are verdicts: nothing changed. A refused dial never
// left the client. Everything else (a timeout, a reset connection, a 5xx
// answer, the context ending while the request was out) leaves the outcome
// unknown: the write may have been applied, and a resend with the same
// lease ID settles it.
func writeErr(what string, err error) error {
	if errors.Is(err, syscall.ECONNREFUSED) {
		return fmt.Errorf("kubebackend: %s: %w", what, err)
	}
	var st apierrors.APIStatus
	if errors.As(err, &st) {
		code := st.Status().Code
		switch {
		case apierrors.IsTimeout(err), apierrors.IsServerTimeout(err), code >= 500:
			return fmt.Errorf("kubebackend: %s: %w: %w", what, backend.ErrOutcomeUnknown, err)
		default:
			return fmt.Errorf("kubebackend: %s: %w", what, err)
		}
	}
	return fmt.Errorf("kubebackend: %s: %w: %w", what, backend.ErrOutcomeUnknown, err)
}

// readErr wraps the error of a read: a read changes nothing, so its outcome
// is never in doubt.
func readErr(what string, err error) error {
	if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return fmt.Errorf("kubebackend: %s: %w", what, err)
	}
	return fmt.Errorf("kubebackend: %s: %w", what, err)
}
