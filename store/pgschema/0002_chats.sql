-- DeleteChat unbinds every conversation that points at the deleted session.
CREATE INDEX conversations_session_idx ON conversations (session_id);
