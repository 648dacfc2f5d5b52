package dingtalk

import (
	"encoding/json"
	"fmt"
)

// DecodeRef rebuilds a Ref recorded as JSON (channels.RefDecoder), so that another gateway replica
// can answer the conversation: through the session webhook while it lives, the robot OpenAPI after.
func (c *Channel) DecodeRef(raw json.RawMessage) (any, error) {
	var r Ref
	if err := json.Unmarshal(raw, &r); err != nil {
		return nil, fmt.Errorf("dingtalk: decode message reference: %w", err)
	}
	return &r, nil
}
