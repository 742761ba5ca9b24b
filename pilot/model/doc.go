// Package model is Sextant's view of the mesh: services, endpoints, workloads and policy, indexed in an
// immutable PushContext that is rebuilt partially after each change and read without locks.
package model
