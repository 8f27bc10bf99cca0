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
// What it cannot cover: creates (there is no stored token to compare
// with), deletes (a delete carries no object to stamp), and objects or
// writers without the annotation (an update that drops it is refused once
// the object has one; an object that never had one is not fenced). See
// docs/kubernetes.md.
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
)

// Annotation is the annotation that carries an object's fencing token, in
// decimal.
const Annotation = "fencing-go.github.io/fence"

// denial starts the message of every refusal the policy makes.
const denial = "stale fencing token"

// Stamp puts token on obj, as the token of the write about to be sent.
func Stamp(obj metav1.Object, token uint64) {
	a := obj.GetAnnotations()
	if a == nil {
		a = make(map[string]string)
	}
	a[Annotation] = strconv.FormatUint(token, 10)
	obj.SetAnnotations(a)
}

// Token returns the token stamped on obj, if any.
func Token(obj metav1.Object) (uint64, bool) {
	v, ok := obj.GetAnnotations()[Annotation]
	if !ok {
		return 0, false
	}
	t, err := strconv.ParseUint(v, 10, 64)
	return t, err == nil
}

// Stale converts the API server's refusal of a stale write into an error
// that wraps guard.ErrStaleToken (and the API status error, for
// errors.As); any other error is returned as it is.
func Stale(err error) error {
	if err != nil && apierrors.IsInvalid(err) && strings.Contains(err.Error(), denial) {
		return fmt.Errorf("%w: %w", guard.ErrStaleToken, err)
	}
	return err
}

// expression is the policy's rule: an update keeps or raises the stored
// token, and never drops it.
const expression = `!has(oldObject.metadata.annotations) ||
  !('` + Annotation + `' in oldObject.metadata.annotations) ||
  (has(object.metadata.annotations) &&
   '` + Annotation + `' in object.metadata.annotations &&
   uint(object.metadata.annotations['` + Annotation + `']) >= uint(oldObject.metadata.annotations['` + Annotation + `']))`

// messageExpression tells the two tokens.
const messageExpression = `'` + denial + `: ' +
  (has(object.metadata.annotations) && '` + Annotation + `' in object.metadata.annotations ?
    object.metadata.annotations['` + Annotation + `'] : 'none') +
  ' is below the object\'s ' + oldObject.metadata.annotations['` + Annotation + `']`

// Policy returns a ValidatingAdmissionPolicy named name that fences
// updates of the resources rules match, and the binding that enforces it
// (Deny). A nil namespaceSelector matches every namespace.
func Policy(name string, rules []admissionv1.NamedRuleWithOperations, namespaces *metav1.LabelSelector) (*admissionv1.ValidatingAdmissionPolicy, *admissionv1.ValidatingAdmissionPolicyBinding) {
	for i := range rules {
		rules[i].Operations = []admissionv1.OperationType{admissionv1.Update}
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
			Validations: []admissionv1.Validation{{
				Expression:        expression,
				MessageExpression: messageExpression,
			}},
		},
	}
	b := &admissionv1.ValidatingAdmissionPolicyBinding{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: admissionv1.ValidatingAdmissionPolicyBindingSpec{
			PolicyName:        name,
			ValidationActions: []admissionv1.ValidationAction{admissionv1.Deny},
		},
	}
	return p, b
}

// Install creates or replaces the policy and binding that Policy returns.
// The API server applies a new policy after a short delay (its policy
// informer): a caller that needs it in force writes a probe object first
// (the tests do).
func Install(ctx context.Context, client kubernetes.Interface, name string, rules []admissionv1.NamedRuleWithOperations, namespaces *metav1.LabelSelector) error {
	p, b := Policy(name, rules, namespaces)
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
