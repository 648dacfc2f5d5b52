package channels

import "encoding/json"

// RefDecoder is implemented by a channel whose Message.Ref cannot be rebuilt from the message's
// other fields. Several gateway replicas share one database: when the replica that took a message
// dies mid-answer, another one tells the conversation, from the message as recorded with the run
// (Ref encoded with encoding/json). DecodeRef turns that JSON back into the channel's Ref.
type RefDecoder interface {
	DecodeRef(raw json.RawMessage) (any, error)
}
