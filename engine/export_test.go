package engine

// NotifyChannel returns the channel the store notifies on when work becomes
// ready, for tests that listen to it directly.
func (s *PGStore) NotifyChannel() string { return s.channel }
