package main

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"syscall"
	"time"

	"github.com/cockroachdb/errors"

	"github.com/cairnflow/cairn/engine/store"
	"github.com/cairnflow/cairn/examples/intake"
	"github.com/cairnflow/cairn/server"
)

// serveRemoteOCR is what demo run --remote-ocr adds: the HTTP API (the
// remote step protocol among it) on --remote-listen, and the Python OCR
// worker (--ocr-worker) serving the queue ocr through it. Without the
// worker's script it says how to start one: the demo's pages wait for it.
// The returned function stops both.
func serveRemoteOCR(st store.Store, g *globals, f *demoFlags, out io.Writer) (func(), error) {
	srv, err := server.New(server.Config{Store: st})
	if err != nil {
		return nil, err
	}
	// Its notifier wakes the workers' long polls as steps are dispatched.
	if err := srv.Start(context.Background()); err != nil {
		return nil, err
	}
	ln, err := net.Listen("tcp", f.remoteListen)
	if err != nil {
		return nil, errors.Wrapf(err, "--remote-listen %s", f.remoteListen)
	}
	hs := &http.Server{Handler: srv.Handler(), ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = hs.Serve(ln) }()
	url := "http://" + ln.Addr().String()
	stop := func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		srv.Drain()
		_ = hs.Shutdown(ctx)
		_ = srv.Stop(ctx)
	}
	args := []string{f.ocrWorker, "--url", url, "--queue", intake.OCRQueue, "--concurrency", "4", "--worker-id", "demo-py",
		"--namespace", g.namespace}
	if _, err := os.Stat(f.ocrWorker); f.ocrWorker == "" || err != nil {
		fmt.Fprintf(out, "remote OCR: the worker protocol is on %s; the pages wait for a worker of queue %s: start one with\n  python3 %s\n",
			url, intake.OCRQueue, shellJoin(append([]string{"clients/python/examples/ocr_worker.py"}, args[1:]...)))
		return stop, nil
	}
	cmd := exec.Command("python3", args...)
	cmd.Stdout, cmd.Stderr = io.Discard, out
	if err := cmd.Start(); err != nil {
		stop()
		return nil, errors.Wrap(err, "start the Python OCR worker (python3)")
	}
	fmt.Fprintf(out, "remote OCR: the worker protocol is on %s; started the Python worker %s (pid %d) for queue %s\n",
		url, f.ocrWorker, cmd.Process.Pid, intake.OCRQueue)
	return func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		done := make(chan struct{})
		go func() { _ = cmd.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(5 * time.Second):
			_ = cmd.Process.Kill()
			<-done
		}
		stop()
	}, nil
}

// shellJoin is args as words of a POSIX shell.
func shellJoin(args []string) string {
	out := ""
	for i, a := range args {
		if i > 0 {
			out += " "
		}
		out += shellQuote(a)
	}
	return out
}
