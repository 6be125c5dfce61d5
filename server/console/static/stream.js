// A task page's live view: the task's streams and history events as
// Server-Sent Events (GET /console/tasks/{id}/stream). Chunks are shown
// per stream as they come; a rewind removes the chunks of the attempt it
// names; a history event refreshes the page's #task-live part (htmx);
// the finished status closes the stream. No framework: EventSource and
// the DOM.
(function () {
  "use strict";
  var box = document.getElementById("task-streams");
  if (!box || !window.EventSource) {
    return;
  }
  var source = new EventSource(box.getAttribute("data-src"));
  var streams = {};
  function streamOf(name) {
    if (!streams[name]) {
      var section = document.createElement("section");
      var title = document.createElement("h3");
      title.textContent = name;
      var pre = document.createElement("pre");
      pre.className = "mono stream";
      pre.setAttribute("data-stream", name);
      section.appendChild(title);
      section.appendChild(pre);
      box.appendChild(section);
      streams[name] = pre;
      box.hidden = false;
    }
    return streams[name];
  }
  function keyOf(d) {
    return d.attempt + "/" + d.position;
  }
  var pending = null;
  function refresh() {
    if (pending || !window.htmx) {
      return;
    }
    pending = setTimeout(function () {
      pending = null;
      var live = document.getElementById("task-live");
      if (live) {
        window.htmx.trigger(live, "cairn:changed");
      }
    }, 200);
  }
  source.addEventListener("chunk", function (e) {
    var d = JSON.parse(e.data);
    var span = document.createElement("span");
    span.setAttribute("data-key", keyOf(d));
    span.textContent = typeof d.data === "string" ? d.data : JSON.stringify(d.data) + "\n";
    streamOf(d.stream).appendChild(span);
  });
  source.addEventListener("rewind", function (e) {
    var d = JSON.parse(e.data);
    var pre = streamOf(d.stream);
    var gone = pre.querySelectorAll('span[data-key="' + keyOf(d) + '"]');
    for (var i = 0; i < gone.length; i++) {
      gone[i].remove();
    }
    var note = document.createElement("span");
    note.className = "muted rewind";
    note.textContent = "\n[attempt " + d.attempt + " failed: its output was discarded]\n";
    pre.appendChild(note);
  });
  source.addEventListener("event", refresh);
  source.addEventListener("status", function (e) {
    var d = JSON.parse(e.data);
    refresh();
    if (d.finished) {
      source.close();
    }
  });
})();
