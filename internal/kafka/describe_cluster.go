package kafka

// DescribeCluster: v0-2
// Behavior:
//  * Lists the brokers Metadata lists (every broker of the cluster's
//    directory, from the genesis, at its advertised address; a single node
//    lists itself), the cluster id, and this broker as the controller:
//    every broker applies every change itself, so whichever broker a client
//    asks can serve admin requests.
//  * Cluster authorized operations are -2147483648 unless asked for; when
//    asked for, the cluster operations the principal has
//    (authorized_ops.go), by the ACLs. DescribeCluster itself needs no
//    permission, as in Kafka.
//  * Only the BROKER endpoint type exists: asking for controllers gets
//    MISMATCHED_ENDPOINT_TYPE (INVALID_REQUEST in v0), an unknown type
//    UNSUPPORTED_ENDPOINT_TYPE, as Kafka's brokers answer.
//  * No broker is ever fenced (v2's include_fenced_brokers changes nothing):
//    a broker that stopped signing blocks is still listed, as Metadata
//    still lists it as a replica.
// Not done: racks; brokers added after genesis (the directory is the
// genesis's until membership changes through consensus, DESIGN.md §4).

import (
	"fmt"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// endpointTypeBroker and endpointTypeController are KIP-919's endpoint types.
const (
	endpointTypeBroker     = 1
	endpointTypeController = 2
)

func handleDescribeCluster(c *conn, req kmsg.Request) (respond, error) {
	r := req.(*kmsg.DescribeClusterRequest)
	resp := r.ResponseKind().(*kmsg.DescribeClusterResponse)
	resp.EndpointType = endpointTypeBroker
	resp.ClusterAuthorizedOperations = authorizedOpsUnknown
	switch r.EndpointType {
	case endpointTypeBroker:
	case endpointTypeController:
		resp.ErrorCode = kerr.MismatchedEndpointType.Code
		if r.Version == 0 {
			resp.ErrorCode = kerr.InvalidRequest.Code
		}
		resp.ErrorMessage = kmsg.StringPtr("The request was sent to an endpoint of type BROKER, but we wanted an endpoint of type CONTROLLER")
		return done(resp), nil
	default:
		resp.ErrorCode = kerr.UnsupportedEndpointType.Code
		if r.Version == 0 {
			resp.ErrorCode = kerr.InvalidRequest.Code
		}
		resp.ErrorMessage = kmsg.StringPtr(fmt.Sprintf("Unsupported endpoint type %d", r.EndpointType))
		return done(resp), nil
	}
	resp.ClusterID = c.s.opts.ClusterID
	resp.ControllerID = c.s.opts.NodeID
	resp.Brokers = c.s.clusterBrokers()
	for i := range resp.Brokers {
		b := &resp.Brokers[i]
		b.Host, b.Port = c.advertised(BrokerInfo{NodeID: b.NodeID, Host: b.Host, Port: b.Port})
	}
	if r.IncludeClusterAuthorizedOperations {
		resp.ClusterAuthorizedOperations = c.authorizedOps(kmsg.ACLResourceTypeCluster, clusterResourceName)
	}
	return done(resp), nil
}

// clusterBrokers lists every broker of the cluster, as Metadata does.
func (s *Server) clusterBrokers() []kmsg.DescribeClusterResponseBroker {
	all, _ := s.members()
	out := make([]kmsg.DescribeClusterResponseBroker, len(all))
	for i, m := range all {
		b := kmsg.NewDescribeClusterResponseBroker()
		b.NodeID, b.Host, b.Port = m.NodeID, m.Host, m.Port
		if m.Rack != "" {
			b.Rack = kmsg.StringPtr(m.Rack)
		}
		out[i] = b
	}
	return out
}

// brokerCount is the number of brokers, which is every partition's
// replication factor: every broker holds every partition.
func (s *Server) brokerCount() int16 { return int16(len(s.clusterBrokers())) }
