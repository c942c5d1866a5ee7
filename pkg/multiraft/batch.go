package multiraft

import (
	"go.etcd.io/raft/v3"
	"go.etcd.io/raft/v3/raftpb"
	"google.golang.org/protobuf/proto"

	"github.com/cairnfs/cairn/pkg/multiraft/transportpb"
)

// Batch is everything one host sends to one peer host in one processing round:
// the transport message. A host sends at least one Batch to every peer per
// tick, empty if it has nothing else; its arrival is the node-level liveness
// beat.
type Batch struct {
	From, To NodeID
	// Incarnation is random per Host; a change tells the peer that the
	// sender restarted.
	Incarnation uint64
	// Messages are raft messages in full form. Each message's From and To
	// equal the batch's.
	Messages []GroupMessage
	// Heartbeats are the groups' raft heartbeats and heartbeat responses in
	// compact form (see Heartbeat).
	Heartbeats []Heartbeat
}

// GroupMessage is one raft message of one group.
type GroupMessage struct {
	Group   GroupID
	Message *raftpb.Message
}

// Heartbeat is a coalesced raft heartbeat: a MsgHeartbeat (Response false) or
// MsgHeartbeatResp (Response true) of one group, from the batch's From to its
// To. Only heartbeats without a context travel this way (those with one serve
// ReadIndex and go in full form); the receiver expands it back to the raft
// message.
type Heartbeat struct {
	Group    GroupID
	Term     uint64
	Commit   uint64 // MsgHeartbeat.Commit; 0 in responses
	Response bool
	// Quiesce marks the leader's last heartbeat before it stops ticking the
	// group. Index and LogTerm are the leader's last log position; a follower
	// whose log and commit match quiesces too.
	Quiesce        bool
	Index, LogTerm uint64
	// Stamp is the leader's lease clock when it sent the heartbeat; a
	// follower's response echoes it (see lease.go). 0: none.
	Stamp int64
}

// Empty reports whether b carries nothing but the liveness beat.
func (b *Batch) Empty() bool { return len(b.Messages) == 0 && len(b.Heartbeats) == 0 }

// toMessage expands a coalesced heartbeat into the raft message it stands for.
func (hb *Heartbeat) toMessage(from, to NodeID) *raftpb.Message {
	m := &raftpb.Message{
		From: proto.Uint64(uint64(from)),
		To:   proto.Uint64(uint64(to)),
		Term: proto.Uint64(hb.Term),
	}
	if hb.Response {
		// A response's stamp is the host's business, not raft's: a context
		// would read to raft as a ReadIndex acknowledgement.
		m.Type = raftpb.MsgHeartbeatResp.Enum()
	} else {
		m.Type = raftpb.MsgHeartbeat.Enum()
		m.Commit = proto.Uint64(hb.Commit)
		if hb.Stamp != 0 {
			// Raft echoes a heartbeat's context in its response.
			m.Context = stampContext(hb.Stamp)
		}
	}
	return m
}

// coalescible reports whether m can travel as a Heartbeat: a heartbeat
// without a context, or a response whose context is a lease stamp.
func coalescible(m *raftpb.Message) bool {
	switch m.GetType() {
	case raftpb.MsgHeartbeat:
		return len(m.GetContext()) == 0
	case raftpb.MsgHeartbeatResp:
		_, stamped := stampOf(m.GetContext())
		return len(m.GetContext()) == 0 || stamped
	}
	return false
}

// heartbeatOf compacts a coalescible message of group g.
func heartbeatOf(g GroupID, m *raftpb.Message) Heartbeat {
	hb := Heartbeat{Group: g, Term: m.GetTerm()}
	if m.GetType() == raftpb.MsgHeartbeatResp {
		hb.Response = true
		hb.Stamp, _ = stampOf(m.GetContext())
	} else {
		hb.Commit = m.GetCommit()
	}
	return hb
}

// validMessage reports whether an inbound raft message is acceptable from
// peer from to this host: addressed consistently with its batch and of a
// type peers may send (local types would subvert raft).
func validMessage(m *raftpb.Message, from, to NodeID) bool {
	if m == nil || m.GetFrom() != uint64(from) || m.GetTo() != uint64(to) {
		return false
	}
	t := m.GetType()
	if _, ok := raftpb.MessageType_name[int32(t)]; !ok {
		return false
	}
	// Proposals are never forwarded between hosts (Propose fails fast on a
	// follower), and forgetting the leader is this host's own decision.
	// Leadership transfers start only on the leader's own host
	// (Host.TransferLeader), which read leases rely on (lease.go).
	if t == raftpb.MsgProp || t == raftpb.MsgForgetLeader || t == raftpb.MsgTransferLeader {
		return false
	}
	// Raft treats term 0 as a local message; only a forwarded ReadIndex
	// request legitimately travels without a term.
	if m.GetTerm() == 0 && t != raftpb.MsgReadIndex {
		return false
	}
	return !raft.IsLocalMsg(t)
}

// encodeBatch converts b to its wire form. It fails only if a raft message
// cannot be marshaled, which would be a bug.
func encodeBatch(b *Batch) (*transportpb.Batch, error) {
	pb := &transportpb.Batch{
		From:        uint64(b.From),
		To:          uint64(b.To),
		Incarnation: b.Incarnation,
	}
	if len(b.Messages) > 0 {
		pb.Messages = make([]*transportpb.GroupMessage, len(b.Messages))
		for i, gm := range b.Messages {
			data, err := proto.Marshal(gm.Message)
			if err != nil {
				return nil, err
			}
			pb.Messages[i] = &transportpb.GroupMessage{Group: uint64(gm.Group), Message: data}
		}
	}
	if len(b.Heartbeats) > 0 {
		pb.Heartbeats = make([]*transportpb.Heartbeat, len(b.Heartbeats))
		for i, hb := range b.Heartbeats {
			pb.Heartbeats[i] = &transportpb.Heartbeat{
				Group: uint64(hb.Group), Term: hb.Term, Commit: hb.Commit,
				Response: hb.Response, Quiesce: hb.Quiesce, Index: hb.Index, LogTerm: hb.LogTerm,
				Stamp: hb.Stamp,
			}
		}
	}
	return pb, nil
}

// decodeBatch converts a wire batch back. Raft messages that do not decode are
// left out and counted in malformed; the rest of the batch is kept.
func decodeBatch(pb *transportpb.Batch) (b *Batch, malformed int) {
	b = &Batch{From: NodeID(pb.GetFrom()), To: NodeID(pb.GetTo()), Incarnation: pb.GetIncarnation()}
	if n := len(pb.GetMessages()); n > 0 {
		b.Messages = make([]GroupMessage, 0, n)
		for _, gm := range pb.GetMessages() {
			m := &raftpb.Message{}
			if err := proto.Unmarshal(gm.GetMessage(), m); err != nil {
				malformed++
				continue
			}
			b.Messages = append(b.Messages, GroupMessage{Group: GroupID(gm.GetGroup()), Message: m})
		}
	}
	if n := len(pb.GetHeartbeats()); n > 0 {
		b.Heartbeats = make([]Heartbeat, n)
		for i, hb := range pb.GetHeartbeats() {
			b.Heartbeats[i] = Heartbeat{
				Group: GroupID(hb.GetGroup()), Term: hb.GetTerm(), Commit: hb.GetCommit(),
				Response: hb.GetResponse(), Quiesce: hb.GetQuiesce(), Index: hb.GetIndex(), LogTerm: hb.GetLogTerm(),
				Stamp: hb.GetStamp(),
			}
		}
	}
	return b, malformed
}
