/* The documents upload page (admin/knowledge/document/upload.html): says what was chosen before
   anything is sent. More files than one upload may hold block the form with the reason (the
   server would refuse the whole request); a file over the size limit is named, since the server
   refuses it (the others still go in); the title, which names one document, is off while
   several files are chosen. Files may also be dropped on the form (#upload-drop shows where);
   they become the chosen files. A static file: the Content-Security-Policy allows no inline
   script. */
(function () {
  "use strict";
  var input = document.querySelector("input[type=file][data-qa-max-bytes]");
  if (!input) return;
  var maxFiles = Number(input.getAttribute("data-qa-max-files")) || 0;
  var maxBytes = Number(input.getAttribute("data-qa-max-bytes")) || 0;
  var title = input.form ? input.form.elements.namedItem("title") : null;
  var note = document.getElementById("upload-selection");

  function megabytes(bytes) {
    return (bytes / 1048576).toFixed(1) + " MB";
  }

  function describe() {
    var files = Array.prototype.slice.call(input.files || []);
    var problem = "";
    if (maxFiles && files.length > maxFiles) {
      problem = files.length + " files chosen: one upload holds at most " + maxFiles +
        ". Choose fewer, and upload the rest next.";
    }
    input.setCustomValidity(problem);
    var big = files.filter(function (f) { return maxBytes && f.size > maxBytes; });
    var lines = [];
    if (problem) {
      lines.push(problem);
    } else if (files.length) {
      lines.push(files.length + " file(s) chosen.");
    }
    if (big.length) {
      lines.push("Over the " + megabytes(maxBytes) + " limit, to be refused: " +
        big.map(function (f) { return f.name + " (" + megabytes(f.size) + ")"; }).join(", ") + ".");
    }
    if (title) title.disabled = files.length > 1;
    if (note) note.textContent = lines.join(" ");
  }

  input.addEventListener("change", describe);
  describe();

  // Drag and drop: files dropped anywhere on the form are the files chosen.
  var form = input.form;
  var zone = document.getElementById("upload-drop");
  if (!form || !zone) return;
  zone.hidden = false;
  var depth = 0;
  function carriesFiles(event) {
    var types = event.dataTransfer ? Array.prototype.slice.call(event.dataTransfer.types || []) : [];
    return types.indexOf("Files") !== -1;
  }
  form.addEventListener("dragenter", function (event) {
    if (!carriesFiles(event)) return;
    event.preventDefault();
    depth += 1;
    form.classList.add("upload-dragging");
  });
  form.addEventListener("dragover", function (event) {
    if (!carriesFiles(event)) return;
    event.preventDefault();
    event.dataTransfer.dropEffect = "copy";
  });
  form.addEventListener("dragleave", function () {
    depth = Math.max(0, depth - 1);
    if (!depth) form.classList.remove("upload-dragging");
  });
  form.addEventListener("drop", function (event) {
    if (!carriesFiles(event)) return;
    event.preventDefault();
    depth = 0;
    form.classList.remove("upload-dragging");
    input.files = event.dataTransfer.files;
    describe();
    input.focus();
  });
})();
