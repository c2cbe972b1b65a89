// The keys of a frame's `meta` map that tracr writes and reads, named once
// (PROTOCOL.md 3.4 "Replies", 3.5 and section 5, where each is specified).
// A peer's other keys pass through unread.
#pragma once

namespace tracr::protocol::meta_key {

inline constexpr char kReqSeq[] = "req_seq";              // a reply or ERROR: the seq of the request it answers
inline constexpr char kModelFp[] = "model_fp";            // a request: the participant's model fingerprint
inline constexpr char kLast[] = "last";                   // INFER_REQUEST: its segment's end layer (echoed in the
                                                          // reply); TRAIN_*: the last segment it covers
inline constexpr char kThen[] = "then";                   // INFER_REQUEST to a middle tier: the cuts after `last`
                                                          // ("13", "13|20", "" = the next device runs to N)
inline constexpr char kFwdEncodeNs[] = "fwd_encode_ns";   // a middle's reply: encoding the forwarded request
inline constexpr char kFwdRawBytes[] = "fwd_raw_bytes";   // a middle's reply: the forwarded request's tensor bytes
inline constexpr char kFwdWireBytes[] = "fwd_wire_bytes"; // a middle's reply: the forwarded request on the wire
inline constexpr char kFwdRttNs[] = "fwd_rtt_ns";         // a middle's reply: forwarded request's encoding to the
                                                          // next device's reply decoded
inline constexpr char kFwdDecodeNs[] = "fwd_decode_ns";   // a middle's reply: decoding the next device's reply
inline constexpr char kFwdReplyBytes[] = "fwd_reply_bytes";  // a middle's reply: the next device's reply on the wire
inline constexpr char kDownPrefix[] = "d.";               // a middle's reply: the next device's reply meta, nested
inline constexpr char kSrvNs[] = "srv_ns";                // a reply: last segment's arrival to the reply's encoding
inline constexpr char kSrvDecodeNs[] = "srv_decode_ns";   // a reply: the server decoding the request
inline constexpr char kSrvTailNs[] = "srv_tail_ns";       // a reply: the server running layers [k, last)
inline constexpr char kSrvEnergy[] = "srv_energy";        // a reply: the server's energy rows for the tail, packed
inline constexpr char kSrvBatch[] = "srv_batch";          // a reply: frames whose segments ran as one batch with it
inline constexpr char kSrvBatchWaitNs[] = "srv_batch_wait_ns";  // a reply: request decoded to its batch's start
inline constexpr char kSrvRawBytes[] = "srv_raw_bytes";   // an echo reply: the request's raw tensor bytes
inline constexpr char kSrvWireBytes[] = "srv_wire_bytes"; // an echo reply: the request's bytes on the wire

}  // namespace tracr::protocol::meta_key
