// Package kubeguard makes the Kubernetes API server itself refuse a deposed
// holder's late write: a ValidatingAdmissionPolicy compares the fencing
// token stamped on an updated object (an annotation) with the token on the
// stored one, and denies a lower one.
//
// The API server evaluates the policy inside the update's own
// read-compare-write step (the stored object it compares with is the one
// the write replaces; when that changed meanwhile, the update is retried
// and the policy evaluated again), so the check is atomic with the write:
// the token on an object never goes down, whatever the writers' order.
//
// Only canonical tokens pass (decimal, 1 to 2^64-1, no leading zeros,
// signs or spaces), on creates too. With WithMintCheck the policy also
// reads the key's kubebackend Lease (its paramRef) and refuses a token
// above the highest that Lease has minted, so a forged token cannot raise
// the fence beyond every real holder's reach. A fence raised by a token
// that should never have been admitted is lowered by hand, without
// deleting the object: an update that carries LowerAnnotation with the
// current fence, from a user that RBAC lets "lower" "fences" in the API
// group fencing-go.github.io (see Lower).
//
// What it cannot cover: a create's token has no stored token to compare
// with, deletes (a delete carries no object to stamp), and objects or
// writers without the annotation (an update that drops it is refused once
// the object has one; an object that never had one is not fenced). See
// docs/kubernetes.md.
//
// The fence is the object's own annotation, so it goes with the object:
// deleting the object drops its fence, and there is nothing else to delete.
// A name used again has no fence until its new object is stamped; an old
// holder's create in between is not fenced. Keep the object (emptied, or
// marked deleted) instead when its name may be used again: see "Dropping a
// fence" in docs/guards.md.
package kubeguard

import (
	"context"
	"fmt"
	"strconv"
	"strings"

	admissionv1 "k8s.io/api/admissionregistration/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/fencing-go/fencing/guard"
	"github.com/fencing-go/fencing/kubebackend"
)

// Annotation is the annotation that carries an object's fencing token, in
// decimal.
const Annotation = "fencing-go.github.io/fence"

// LowerAnnotation is the break-glass annotation: an update that carries it
// with the object's current fence (as stored, character for character) may
// lower the fence, or drop it, if the user who sends it may "lower"
// "fences" in the API group fencing-go.github.io in the object's namespace
// (an RBAC rule; see docs/kubernetes.md). Stamp removes it.
const LowerAnnotation = "fencing-go.github.io/lower-fence"

// The messages of the policy's refusals start with these.
const (
	denial      = "stale fencing token"
	notMinted   = "fencing token never minted"
	notCanon    = "fencing token not canonical"
	breakGlassG = "fencing-go.github.io"
	// noLease is how the API server words a refusal by a binding whose
	// paramRef names no object (WithMintCheck's Lease is not there: never
	// created, deleted, or reclaimed by kubebackend's retention). The
	// policy's rules never ran, so its message is the API server's.
	noLease = "no params found for policy binding"
)

// Stamp puts token on obj, as the token of the write about to be sent, and
// removes the break-glass annotation if obj has it.
func Stamp(obj metav1.Object, token uint64) {
	a := obj.GetAnnotations()
	if a == nil {
		a = make(map[string]string)
	}
	a[Annotation] = strconv.FormatUint(token, 10)
	delete(a, LowerAnnotation)
	obj.SetAnnotations(a)
}

// Lower prepares obj, as read with fence from, for the break-glass update
// that sets its fence to to (0: drops it): it must be sent by a user the
// policy lets lower fences (see LowerAnnotation). The update is refused
// if the stored fence is no longer from, and (under WithMintCheck) if to
// was never minted. A lowered fence admits tokens it refused before: lower
// it only after every holder of the tokens between to and from has
// stopped.
func Lower(obj metav1.Object, from string, to uint64) {
	a := obj.GetAnnotations()
	if a == nil {
		a = make(map[string]string)
	}
	a[LowerAnnotation] = from
	if to == 0 {
		delete(a, Annotation)
	} else {
		a[Annotation] = strconv.FormatUint(to, 10)
	}
	obj.SetAnnotations(a)
}

// Token returns the token stamped on obj, if any, and if it is canonical:
// decimal, 1 to 2^64-1, without leading zeros, signs or spaces.
func Token(obj metav1.Object) (uint64, bool) {
	v, ok := obj.GetAnnotations()[Annotation]
	if !ok {
		return 0, false
	}
	return parseCanonical(v)
}

func parseCanonical(v string) (uint64, bool) {
	if v == "" || v[0] < '1' || v[0] > '9' {
		return 0, false
	}
	t, err := strconv.ParseUint(v, 10, 64)
	return t, err == nil
}

// Stale converts the API server's refusal of a write by the policy into an
// error that wraps the guard's sentinel (and the API status error, for
// errors.As): guard.ErrStaleToken for a token below the object's,
// guard.ErrNotMinted for one above what the key's Lease minted (or when the
// Lease is not there), guard.ErrInvalidToken for one that is not a
// canonical number. Any other error is returned as it is.
func Stale(err error) error {
	if err == nil || !apierrors.IsInvalid(err) && !apierrors.IsForbidden(err) {
		return err
	}
	msg := err.Error()
	switch {
	case strings.Contains(msg, denial):
		return fmt.Errorf("%w: %w", guard.ErrStaleToken, err)
	case strings.Contains(msg, notMinted), strings.Contains(msg, noLease):
		return fmt.Errorf("%w: %w", guard.ErrNotMinted, err)
	case strings.Contains(msg, notCanon):
		return fmt.Errorf("%w: %w", guard.ErrInvalidToken, err)
	}
	return err
}

// The policy's variables: the new and stored fences (empty when absent),
// whether each is canonical, and whether the update is a break-glass.
const (
	varNew = `has(object.metadata.annotations) && '` + Annotation + `' in object.metadata.annotations ?
  object.metadata.annotations['` + Annotation + `'] : ''`
	varOld = `oldObject != null && has(oldObject.metadata.annotations) && '` + Annotation + `' in oldObject.metadata.annotations ?
  oldObject.metadata.annotations['` + Annotation + `'] : ''`
	canonical = `.matches('^[1-9][0-9]{0,19}$') && (size(%[1]s) < 20 || %[1]s <= '18446744073709551615')`
	varLower  = `variables.old != '' &&
  has(object.metadata.annotations) && '` + LowerAnnotation + `' in object.metadata.annotations &&
  object.metadata.annotations['` + LowerAnnotation + `'] == variables.old &&
  authorizer.group('` + breakGlassG + `').resource('fences').namespace(request.namespace).check('lower').allowed()`
	// varMinted is the highest token the key's Lease minted (its token
	// annotation, which kubebackend writes with every grant); 0 for none.
	varMinted = `has(params.metadata.annotations) && 'fencing-go.github.io/token' in params.metadata.annotations &&
  params.metadata.annotations['fencing-go.github.io/token'].matches('^[1-9][0-9]{0,19}$') &&
  (size(params.metadata.annotations['fencing-go.github.io/token']) < 20 || params.metadata.annotations['fencing-go.github.io/token'] <= '18446744073709551615') ?
  uint(params.metadata.annotations['fencing-go.github.io/token']) : uint(0)`
)

// The policy's rules, each with its message.
const (
	// exprCanonical: a token stamped is a canonical number.
	exprCanonical = `variables.new == '' || variables.newOK`
	msgCanonical  = `'` + notCanon + `: ' + variables.new + ' is not a decimal from 1 to 18446744073709551615 without leading zeros, signs or spaces'`
	// exprStale: an update keeps or raises the stored token and never
	// drops it, unless it is a break-glass; a stored fence that is not
	// canonical (stamped before the policy refused such) can only be
	// lowered that way.
	exprStale = `variables.old == '' || variables.lower ||
  (variables.new != '' && variables.newOK && variables.oldOK && uint(variables.new) >= uint(variables.old))`
	msgStale = `'` + denial + `: ' + (variables.new != '' ? variables.new : 'none') +
  (variables.oldOK ? ' is below the object\'s ' + variables.old :
   ' cannot replace the object\'s fence ' + variables.old + ', which is not canonical (lower it by hand)')`
	// exprMinted: a token stamped was minted on the key's Lease.
	exprMinted = `variables.new == '' || !variables.newOK || uint(variables.new) <= variables.minted`
	msgMinted  = `'` + notMinted + `: ' + variables.new + ' is above ' + string(variables.minted) +
  ', the highest token Lease ' + params.metadata.namespace + '/' + params.metadata.name + ' has minted'`
)

// An Option configures the policy that Policy and Install make.
type Option func(*config)

type config struct {
	mintNS, mintLease string
}

// WithMintCheck makes the policy refuse a token above the highest that the
// kubebackend Lease of key in namespace has minted (its
// fencing-go.github.io/token annotation), so that a forged token cannot
// raise an object's fence beyond every real holder's reach. The binding
// names the Lease (paramRef); the API server reads it from its own
// informer cache, so the check costs no request, but a token minted a
// moment ago may be refused as never minted until that cache has seen the
// grant (a few milliseconds on one API server): a holder retries a
// refusal wrapping guard.ErrNotMinted briefly. While the Lease does not
// exist (the key never leased, or its Lease reclaimed by kubebackend's
// WithRetention) every write the rules match is refused, one without a
// token too, wrapping guard.ErrNotMinted. One binding serves one key: the
// objects the rules match are those that key fences.
func WithMintCheck(namespace, key string) Option {
	return func(c *config) { c.mintNS, c.mintLease = namespace, kubebackend.LeaseName(key) }
}

// Policy returns a ValidatingAdmissionPolicy named name that fences
// creates and updates of the resources rules match, and the binding that
// enforces it (Deny). A nil namespaceSelector matches every namespace.
//
// The policy refuses a token that is not a canonical number (decimal,
// 1 to 2^64-1, no leading zeros, signs or spaces); an update whose token is
// below the stored object's, or that drops it, unless it is a break-glass
// (LowerAnnotation, Lower); and with WithMintCheck a token above what the
// key's Lease minted.
func Policy(name string, rules []admissionv1.NamedRuleWithOperations, namespaces *metav1.LabelSelector, opts ...Option) (*admissionv1.ValidatingAdmissionPolicy, *admissionv1.ValidatingAdmissionPolicyBinding) {
	var c config
	for _, o := range opts {
		o(&c)
	}
	for i := range rules {
		rules[i].Operations = []admissionv1.OperationType{admissionv1.Create, admissionv1.Update}
	}
	fail := admissionv1.Fail
	p := &admissionv1.ValidatingAdmissionPolicy{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: admissionv1.ValidatingAdmissionPolicySpec{
			FailurePolicy: &fail,
			MatchConstraints: &admissionv1.MatchResources{
				ResourceRules:     rules,
				NamespaceSelector: namespaces,
			},
			Variables: []admissionv1.Variable{
				{Name: "new", Expression: varNew},
				{Name: "old", Expression: varOld},
				{Name: "newOK", Expression: "variables.new" + fmt.Sprintf(canonical, "variables.new")},
				{Name: "oldOK", Expression: "variables.old" + fmt.Sprintf(canonical, "variables.old")},
				{Name: "lower", Expression: varLower},
			},
			Validations: []admissionv1.Validation{
				{Expression: exprCanonical, MessageExpression: msgCanonical},
				{Expression: exprStale, MessageExpression: msgStale},
			},
		},
	}
	b := &admissionv1.ValidatingAdmissionPolicyBinding{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: admissionv1.ValidatingAdmissionPolicyBindingSpec{
			PolicyName:        name,
			ValidationActions: []admissionv1.ValidationAction{admissionv1.Deny},
		},
	}
	if c.mintLease != "" {
		p.Spec.ParamKind = &admissionv1.ParamKind{APIVersion: "coordination.k8s.io/v1", Kind: "Lease"}
		p.Spec.Variables = append(p.Spec.Variables, admissionv1.Variable{Name: "minted", Expression: varMinted})
		p.Spec.Validations = append(p.Spec.Validations, admissionv1.Validation{Expression: exprMinted, MessageExpression: msgMinted})
		deny := admissionv1.DenyAction
		b.Spec.ParamRef = &admissionv1.ParamRef{Name: c.mintLease, Namespace: c.mintNS, ParameterNotFoundAction: &deny}
	}
	return p, b
}

// Install creates or replaces the policy and binding that Policy returns.
// The API server applies a new policy after a short delay (its policy
// informer): a caller that needs it in force writes a probe object first
// (the tests do).
func Install(ctx context.Context, client kubernetes.Interface, name string, rules []admissionv1.NamedRuleWithOperations, namespaces *metav1.LabelSelector, opts ...Option) error {
	p, b := Policy(name, rules, namespaces, opts...)
	api := client.AdmissionregistrationV1()
	if err := upsert(ctx, p, api.ValidatingAdmissionPolicies().Create, api.ValidatingAdmissionPolicies().Get, api.ValidatingAdmissionPolicies().Update); err != nil {
		return fmt.Errorf("kubeguard: policy %s: %w", name, err)
	}
	if err := upsert(ctx, b, api.ValidatingAdmissionPolicyBindings().Create, api.ValidatingAdmissionPolicyBindings().Get, api.ValidatingAdmissionPolicyBindings().Update); err != nil {
		return fmt.Errorf("kubeguard: binding %s: %w", name, err)
	}
	return nil
}

type object interface {
	metav1.Object
	comparable
}

func upsert[T object](ctx context.Context, obj T,
	create func(context.Context, T, metav1.CreateOptions) (T, error),
	get func(context.Context, string, metav1.GetOptions) (T, error),
	update func(context.Context, T, metav1.UpdateOptions) (T, error),
) error {
	_, err := create(ctx, obj, metav1.CreateOptions{})
	if !apierrors.IsAlreadyExists(err) {
		return err
	}
	old, err := get(ctx, obj.GetName(), metav1.GetOptions{})
	if err != nil {
		return err
	}
	obj.SetResourceVersion(old.GetResourceVersion())
	_, err = update(ctx, obj, metav1.UpdateOptions{})
	return err
}
