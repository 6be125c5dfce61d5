package activities

import "time"

// SetPolicyTimeout sets the bound of one policy evaluation until the
// returned func restores it. Only for tests that are not parallel.
func SetPolicyTimeout(d time.Duration) (restore func()) {
	old := policyTimeout
	policyTimeout = d
	return func() { policyTimeout = old }
}
