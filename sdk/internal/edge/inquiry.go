package edge

import (
	"context"

	"github.com/cockroachdb/errors"

	"github.com/cairnflow/cairn/engine/store"
	"github.com/cairnflow/cairn/payload"
)

// Inquire writes the inquiry p describes (store.InquiryCreate), its arguments encoded
// for its task (sealed with the task's key in an encrypted namespace).
func (e *Store) Inquire(ctx context.Context, p *store.InquiryCreateParams) error {
	q := *p
	if len(p.Args) > 0 {
		enc, err := e.stage.Encode(ctx, []*payload.Payload{{Namespace: p.Namespace, Task: p.TaskID, Kind: payload.Inquiry, Data: p.Args}})
		if err != nil {
			return errors.Wrapf(err, "%s %q: encode the arguments", p.Kind, p.Name)
		}
		q.Args = enc.At(0).Data
	}
	return e.st.InquiryCreate(ctx, &q)
}

// AnswerInquiry writes the answer p describes to in (store.InquiryAnswer), its answer encoded
// for in's task.
func (e *Store) AnswerInquiry(ctx context.Context, in *store.Inquiry, p *store.InquiryAnswerParams) error {
	q := *p
	if len(p.Answer) > 0 {
		enc, err := e.stage.Encode(ctx, []*payload.Payload{{Namespace: in.Namespace, Task: in.TaskID, Kind: payload.Inquiry, Data: p.Answer}})
		if err != nil {
			return errors.Wrapf(err, "answer %s %q: encode the answer", in.Kind, in.Name)
		}
		q.Answer = enc.At(0).Data
	}
	return e.st.InquiryAnswer(ctx, &q)
}

// OpenInquiry decodes in's arguments and answer in place. One that
// stays sealed (this process has no key for the namespace) is left as
// it is; the reader sees it sealed.
func (e *Store) OpenInquiry(ctx context.Context, in *store.Inquiry) error {
	ps := []*payload.Payload{
		{Namespace: in.Namespace, Task: in.TaskID, Kind: payload.Inquiry, Data: in.Args},
		{Namespace: in.Namespace, Task: in.TaskID, Kind: payload.Inquiry, Data: in.Answer},
	}
	if err := e.Decode(ctx, ps); err != nil {
		return errors.Wrapf(err, "%s %q: decode", in.Kind, in.Name)
	}
	in.Args, in.Answer = ps[0].Data, ps[1].Data
	return nil
}
