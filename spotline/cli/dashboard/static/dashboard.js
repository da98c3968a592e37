// Spotline dashboard: refresh the page's content in place (no flicker), fill each queued job's
// explanation as its row comes into view, and send actions after a confirmation.
"use strict";
(function () {
  const content = document.getElementById("content");
  const flash = document.getElementById("flash");
  const updated = document.getElementById("updated");
  const csrf = document.querySelector('meta[name="csrf-token"]').content;
  const refreshMs = 1000 * parseFloat(document.querySelector('meta[name="refresh-s"]').content || "5");
  const explained = new Map(); // job id -> {at, html}
  let busy = false;
  let last = ""; // the content last swapped in

  function say(message, ok) {
    flash.textContent = message;
    flash.className = ok ? "ok" : "error";
    flash.hidden = false;
  }

  function fillRow(row, html) {
    const holder = document.createElement("div");
    holder.innerHTML = html;
    for (const template of holder.querySelectorAll("template[data-cell]")) {
      const name = template.dataset.cell;
      const cell = row.querySelector("td." + name);
      if (cell && cell.innerHTML !== template.innerHTML) {
        cell.innerHTML = template.innerHTML;
        cell.classList.remove("muted");
      }
    }
    row.dataset.explained = "1";
  }

  async function explain(row) {
    const id = row.dataset.job;
    const cached = explained.get(id);
    if (cached) fillRow(row, cached.html);
    if (cached && Date.now() - cached.at < 3 * refreshMs) return;
    const response = await fetch(row.dataset.explain, { credentials: "same-origin" });
    if (!response.ok) return;
    const html = await response.text();
    explained.set(id, { at: Date.now(), html: html });
    fillRow(row, html);
  }

  const observer = new IntersectionObserver(function (entries) {
    for (const entry of entries) if (entry.isIntersecting) explain(entry.target);
  });

  function wire() {
    observer.disconnect();
    for (const row of content.querySelectorAll("tr[data-explain]")) {
      const cached = explained.get(row.dataset.job);
      if (cached) fillRow(row, cached.html);
      observer.observe(row);
    }
  }

  async function refresh() {
    if (busy || content.dataset.refresh === "off" || document.hidden) return;
    if (content.contains(document.activeElement) && document.activeElement.matches("input, select, textarea")) return;
    busy = true;
    try {
      const url = new URL(window.location.href);
      url.searchParams.set("fragment", "1");
      const response = await fetch(url, { credentials: "same-origin" });
      const html = await response.text();
      if (html !== last) {
        last = html;
        content.innerHTML = html;
        wire();
      }
      updated.textContent = response.ok ? "updated " + new Date().toISOString().slice(11, 19) + " UTC" : "refresh failed (" + response.status + ")";
    } catch (error) {
      updated.textContent = "refresh failed: " + error;
    } finally {
      busy = false;
    }
  }

  content.addEventListener("submit", async function (event) {
    const form = event.target.closest("form.action");
    if (!form) return;
    event.preventDefault();
    if (!window.confirm(form.dataset.confirm)) return;
    const body = new URLSearchParams(new FormData(form));
    const response = await fetch(form.action, {
      method: "POST",
      body: body,
      credentials: "same-origin",
      headers: { "X-CSRF-Token": csrf },
    });
    let answer = { ok: false, message: "HTTP " + response.status };
    try { answer = await response.json(); } catch (error) { /* keep the status */ }
    say(answer.message, answer.ok);
    last = "";
    await refresh();
  });

  wire();
  setInterval(refresh, refreshMs);
})();
