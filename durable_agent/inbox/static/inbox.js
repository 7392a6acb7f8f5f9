// The approvals inbox's few lines of script: poll the list, keep relative times fresh.
// No eval, no inline script (the page's Content-Security-Policy forbids both).
(function () {
  "use strict";

  function busy(root) {
    // Never re-render the list under someone who is typing a reason or editing arguments.
    const active = document.activeElement;
    if (active && root.contains(active) && /^(INPUT|TEXTAREA|SELECT)$/.test(active.tagName)) {
      return true;
    }
    const edited = Array.from(root.querySelectorAll("textarea, input:not([type=hidden])")).some(
      function (el) { return el.value !== el.defaultValue; }
    );
    return edited || root.querySelector(".htmx-request") !== null;
  }

  // A list asked for before a decision's answer came back would swap that answer (and its
  // confirmation) away with the state from before: such a list is dropped, the next poll
  // shows the run as it is now. That holds from the moment the decision is sent: a list
  // swapped in while it is on its way would replace the card its answer is meant for.
  let decidedAt = 0;

  document.addEventListener("htmx:beforeRequest", function (event) {
    const config = event.detail.requestConfig;
    if (config && String(config.verb).toLowerCase() === "post") {
      decidedAt = Date.now();
    }
  });

  // A decision's answer is its card with a confirmation. The run then goes on, and the
  // next list no longer holds a card for it (or holds a new one, for its next call): the
  // confirmation would be gone before anyone read it. So an answered card is kept for
  // `KEEP_MS`: put back where a list left it out, its confirmation added to a list's new
  // card, then taken away.
  const KEEP_MS = 8000;
  const kept = new Map(); // card id -> {html, until}

  function keep(card) {
    if (card && card.id && card.querySelector("[data-testid=flash]")) {
      kept.set(card.id, { html: card.outerHTML, until: Date.now() + KEEP_MS });
    }
  }

  function restore(body) {
    const now = Date.now();
    kept.forEach(function (entry, id) {
      if (entry.until <= now) {
        kept.delete(id);
        return;
      }
      const template = document.createElement("template");
      template.innerHTML = entry.html.trim();
      const answered = template.content.firstElementChild;
      const listed = document.getElementById(id);
      if (listed === null) {
        answered.dataset.kept = "true";
        body.prepend(answered);
        window.htmx.process(answered);
      } else if (!listed.querySelector("[data-testid=flash]")) {
        const flash = answered.querySelector("[data-testid=flash]");
        listed.querySelector("header").after(flash);
      }
    });
  }

  function drop() {
    const now = Date.now();
    document.querySelectorAll("#runs [data-kept]").forEach(function (card) {
      const entry = kept.get(card.id);
      if (!entry || entry.until <= now) {
        kept.delete(card.id);
        card.remove();
      }
    });
  }

  function poll() {
    const root = document.getElementById("runs");
    if (!root || !window.htmx) {
      return;
    }
    drop();
    if (busy(root)) {
      return;
    }
    const body = document.getElementById("runs-body");
    const version = body ? body.dataset.version : "";
    const at = Date.now();
    window.htmx.ajax("GET", "/runs?v=" + encodeURIComponent(version || "") + "&at=" + at, {
      target: "#runs", swap: "innerHTML",
    });
  }

  document.addEventListener("htmx:afterSwap", function (event) {
    const config = event.detail.requestConfig;
    const verb = config ? String(config.verb).toLowerCase() : "";
    if (verb === "post") {
      decidedAt = Date.now();
      const target = config.target;
      keep(target && target.id ? document.getElementById(target.id) : null);
    } else if (verb === "get") {
      const body = document.getElementById("runs-body");
      if (body && event.detail.target === document.getElementById("runs")) {
        restore(body);
      }
    }
  });

  document.addEventListener("htmx:beforeSwap", function (event) {
    const config = event.detail.requestConfig;
    const sent = config && String(config.verb).toLowerCase() === "get"
      ? /^\/runs\?.*[?&]at=(\d+)/.exec(config.path || "") : null;
    if (sent && decidedAt >= Number(sent[1])) {
      event.detail.shouldSwap = false;
    }
  });

  function relative(iso) {
    const seconds = (Date.parse(iso) - Date.now()) / 1000;
    const future = seconds > 0;
    const s = Math.abs(seconds);
    let amount;
    if (s < 60) amount = Math.floor(s) + " s";
    else if (s < 3600) amount = Math.floor(s / 60) + " min";
    else if (s < 172800) amount = Math.floor(s / 3600) + " h " + Math.floor((s % 3600) / 60) + " min";
    else amount = Math.floor(s / 86400) + " days";
    return future ? "in " + amount : amount + " ago";
  }

  function refreshTimes() {
    document.querySelectorAll("time[data-relative]").forEach(function (el) {
      el.textContent = relative(el.getAttribute("datetime"));
    });
  }

  document.addEventListener("DOMContentLoaded", function () {
    const root = document.getElementById("runs");
    if (root) {
      const every = parseInt(root.dataset.pollMs || "2000", 10);
      window.setInterval(poll, Math.max(every, 500));
    }
    window.setInterval(refreshTimes, 5000);
  });
})();
