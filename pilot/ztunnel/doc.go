// Package ztunnel answers the question "what does ztunnel need to know?": it generates the workload xDS
// resources (istio.workload.Address and istio.security.Authorization) from a PushContext, with delta support.
package ztunnel
