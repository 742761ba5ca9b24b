// Package secretaccess answers whether a workload identity may be served its namespace's Secrets over SDS:
// with a cluster as istiod, whether its service account may list them (a SubjectAccessReview), asked in the
// background and cached; without one, gateways and the named accounts only (FileMode).
package secretaccess
