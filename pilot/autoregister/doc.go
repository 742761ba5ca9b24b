// Package autoregister registers a VM as a WorkloadEntry when its agent connects over xDS naming a WorkloadGroup
// (node metadata AUTO_REGISTER_GROUP), and removes the entry after the agent has gone, as istiod's controller.
package autoregister
