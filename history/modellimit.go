package history

// ModelLimitWaitedData is the payload of model_limit_waited: the step
// at Position (named Step) waited its turn under the rate limit of
// Model for WaitedMS milliseconds before it ran, holding its worker
// slot, with Ahead steps before it in turn when it began to wait and an
// ask of Tokens (its declared Spend.Tokens). It is written with the
// step's completion, before it: a step admitted at once, or one that
// failed after it waited, writes none (the wait shows in the metrics).
type ModelLimitWaitedData struct {
	Position int    `json:"position"`
	Step     string `json:"step"`
	Model    string `json:"model"`
	WaitedMS int64  `json:"waited_ms"`
	Tokens   int64  `json:"tokens"`
	Ahead    int    `json:"ahead"`
}

func (s *State) applyModelLimitWaited(e Event, p ModelLimitWaitedData) error {
	if err := s.requireLeasedAttempt(e); err != nil {
		return err
	}
	switch {
	case p.Position < 0:
		return invalidf(nil, "event %d (%s): position %d", e.Seq, ModelLimitWaited, p.Position)
	case p.Model == "" || len(p.Model) > MaxSpendModelBytes:
		return invalidf(nil, "event %d (%s): a model is 1 to %d bytes", e.Seq, ModelLimitWaited, MaxSpendModelBytes)
	case p.WaitedMS < 0 || p.Tokens < 0 || p.Ahead < 0:
		return invalidf(nil, "event %d (%s): waited %d ms, %d tokens, %d ahead: none may be negative", e.Seq, ModelLimitWaited,
			p.WaitedMS, p.Tokens, p.Ahead)
	}
	return nil
}
