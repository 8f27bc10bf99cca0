package fencing

import (
	"fmt"
	"log/slog"
	"time"

	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/trace"
)

// Option configures a Coordinator.
//
// An option given a value it refuses (a negative WithDefaultMargin, a
// WithDefaultOwner that backend.CheckOwner refuses, a WithDefaultLockDelay
// that backend.CheckLockDelay refuses) leaves New's result a Coordinator
// that takes no lease: every Grant, Renew, Hold, Lock, Do and Resume (and alias)
// fails before any request, whatever its own options, with an error that
// wraps ErrInvalidOption and the value's own sentinel (ErrInvalidMargin,
// ErrInvalidOwner, ErrInvalidLockDelay) and names the option. The first
// such option is the one reported. Token, Release and the other calls that
// take no lease are not affected.
type Option func(*config)

// config is what a Coordinator's Options set: the defaults of the leases it
// takes, how it sends requests, and its instrumentation. The Coordinator
// embeds it.
type config struct {
	defaultMargin time.Duration
	defaultOwner  string
	lockDelay     time.Duration // WithDefaultLockDelay (lockdelay.go)
	badOption     error         // the first option that refused its value (see Option)
	retries       int
	reqTimeout    time.Duration // 0: attempts are bounded by their context alone

	// The instrumentation's (metrics.go, trace.go), which New hands to the
	// Coordinator's observer.
	meterProvider    metric.MeterProvider // WithMeterProvider
	meterProviderSet bool                 // false: the global provider
	logger           *slog.Logger         // WithLogger; nil: no logs
	tracerProvider   trace.TracerProvider // WithTracerProvider; nil: no spans
	keyLabel         func(string) string  // WithKeyLabel; nil: keys are hashed
}

// refuse records that the option named opt refused its value, with err
// saying why (see Option).
func (c *config) refuse(opt string, err error) {
	if c.badOption == nil {
		c.badOption = fmt.Errorf("%w: %s: %w", ErrInvalidOption, opt, err)
	}
}

// HoldOption configures Hold, Do and Lock: the lease they hold. Every
// HoldOption is a LockOption too.
type HoldOption interface {
	LockOption
	hold(*holdConfig) error
}

// LockOption configures Lock, LockMany, LockAny and
// semaphore.Semaphore.Acquire: every HoldOption, and the options of the
// wait (WithFIFO, WithPollInterval, WithWaitTimeout). Hold, Do and
// semaphore.Semaphore.TryAcquire take HoldOption, so an option of a wait
// given to a call that does not wait so does not compile.
type LockOption interface {
	lock(*lockConfig) error
}

// holdOption is a HoldOption: it sets the held lease's configuration.
type holdOption func(*holdConfig) error

func (o holdOption) hold(c *holdConfig) error { return o(c) }
func (o holdOption) lock(c *lockConfig) error { return o(&c.holdConfig) }

// lockOption is a LockOption that only Lock honours: it sets the wait's
// configuration.
type lockOption func(*lockConfig) error

func (o lockOption) lock(c *lockConfig) error { return o(c) }

// holdConfig is what HoldOptions set.
type holdConfig struct {
	margin     time.Duration
	marginSet  bool
	owner      string
	lockDelay  time.Duration // WithLockDelay (lockdelay.go)
	interval   time.Duration // renew this long after each confirmed request was sent
	warnBefore time.Duration // 0: no warnings
	maxHold    time.Duration // the cap on the whole hold (maxhold.go); 0: none
	warnTo     chan Lease    // the warnings' channel, shared by a HeldMany's leases (many.go); nil: the Held's own
	grantOnly  string        // the option given that only a grant honours (WithOwner, WithLockDelay), which Resume refuses
}

// lockConfig is what LockOptions set: the held lease's configuration, and
// the wait's.
type lockConfig struct {
	holdConfig
	pollInterval time.Duration // the fallback poll (WithPollInterval); 0: the default
	waitTimeout  time.Duration // the bound on the wait (WithWaitTimeout); 0: ctx alone
	fifo         bool          // wait in the key's line (WithFIFO, fifo.go)
}

// holdConfig applies opts for a lease of ttl.
func (c *config) holdConfig(ttl time.Duration, opts []HoldOption) (holdConfig, error) {
	cfg := c.defaultHoldConfig()
	for i, o := range opts {
		if o == nil {
			return holdConfig{}, nilOption(i)
		}
		if err := o.hold(&cfg); err != nil {
			return holdConfig{}, err
		}
	}
	return cfg.check(ttl)
}

// lockConfig applies opts for a lease of ttl.
func (c *config) lockConfig(ttl time.Duration, opts []LockOption) (lockConfig, error) {
	cfg := lockConfig{holdConfig: c.defaultHoldConfig()}
	for i, o := range opts {
		if o == nil {
			return lockConfig{}, nilOption(i)
		}
		if err := o.lock(&cfg); err != nil {
			return lockConfig{}, err
		}
	}
	var err error
	cfg.holdConfig, err = cfg.holdConfig.check(ttl)
	return cfg, err
}

// defaultHoldConfig is a held lease's configuration before its options: the
// Coordinator's defaults.
func (c *config) defaultHoldConfig() holdConfig {
	return holdConfig{margin: c.defaultMargin, owner: c.defaultOwner, lockDelay: c.lockDelay}
}

func nilOption(i int) error { return fmt.Errorf("%w: option %d is nil", ErrInvalidOption, i) }

// check completes cfg for a lease of ttl, and checks what no single option
// can. An invalid ttl is left for the backend to report.
func (cfg holdConfig) check(ttl time.Duration) (holdConfig, error) {
	if cfg.interval == 0 {
		cfg.interval = ttl / 3
	} else if ttl > 0 && cfg.interval >= ttl {
		return holdConfig{}, fmt.Errorf("%w: renew interval %v is not shorter than the TTL %v", ErrInvalidOption, cfg.interval, ttl)
	}
	return cfg, nil
}

// grantTimeout is the timeout the grant asks for: ttl, or the maximum
// hold (WithMaxHold) when that is shorter.
func (cfg holdConfig) grantTimeout(ttl time.Duration) time.Duration {
	if cfg.maxHold > 0 && cfg.maxHold < ttl {
		return cfg.maxHold
	}
	return ttl
}
