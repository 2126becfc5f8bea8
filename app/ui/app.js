// Entry point: sign-in, the navigation bar and hash routing between the views.

import { Api, ApiError, forgetKey, storedKey } from "./api.js";
import { notice } from "./dom.js";
import { mountDead } from "./views/dead.js";
import { mountRun } from "./views/run.js";
import { mountRuns } from "./views/runs.js";
import { mountSchedules } from "./views/schedules.js";
import { mountStats } from "./views/stats.js";
import { mountThread } from "./views/thread.js";
import { mountThreads } from "./views/threads.js";
import { mountWorkers } from "./views/workers.js";

const $ = (id) => document.getElementById(id);
const ROUTES = {
  runs: { mount: mountRuns, title: "Runs" },
  run: { mount: mountRun, title: "Run" },
  dead: { mount: mountDead, title: "Dead letters" },
  schedules: { mount: mountSchedules, title: "Schedules" },
  threads: { mount: mountThreads, title: "Threads" },
  thread: { mount: mountThread, title: "Thread" },
  workers: { mount: mountWorkers, title: "Workers", admin: true },
  stats: { mount: mountStats, title: "Queue stats", admin: true },
};

let api = null;
let unmount = () => {};

// "#/runs?status=dead" → {name: "runs", params}; "#/runs/<id>" → {name: "run", id};
// "#/threads/<id>" → {name: "thread", id}.
const ONE_OF = { runs: "run", threads: "thread" };

function parseHash() {
  const [path, search = ""] = location.hash.replace(/^#\/?/, "").split("?");
  const [first = "runs", id] = path.split("/");
  const name = ONE_OF[first] && id ? ONE_OF[first] : first;
  return { name: ROUTES[name] ? name : "runs", id, params: new URLSearchParams(search) };
}

function navigate(hash) {
  if (location.hash === hash) render();
  else location.hash = hash;
}

function render() {
  unmount();
  const view = $("view");
  view.replaceChildren();
  if (!api) return;
  const route = parseHash();
  const { mount, title, admin } = ROUTES[route.name];
  document.title = `${title} · runq`;
  for (const link of document.querySelectorAll("#nav a")) {
    const section = { run: "runs", thread: "threads" }[route.name] ?? route.name;
    const current = link.dataset.route === section;
    if (current) link.setAttribute("aria-current", "page");
    else link.removeAttribute("aria-current");
  }
  if (admin && !api.isAdmin) {
    view.append(notice("This page needs an admin key."));
    unmount = () => {};
    return;
  }
  unmount = mount(view, { api, route, navigate }) ?? (() => {});
}

function showSignedIn() {
  $("sign-in").hidden = true;
  $("nav").hidden = false;
  $("who").hidden = false;
  $("role").textContent = api.isAdmin ? "admin" : "tenant";
  $("role").title = api.isAdmin ? "An admin key: every tenant's runs" : "A tenant key: this tenant's runs";
  for (const link of document.querySelectorAll("#nav [data-admin]")) link.hidden = !api.isAdmin;
  render();
}

function showSignIn(message) {
  unmount();
  unmount = () => {};
  api = null;
  $("view").replaceChildren();
  $("nav").hidden = true;
  $("who").hidden = true;
  $("sign-in").hidden = false;
  const error = $("sign-in-error");
  error.hidden = !message;
  error.textContent = message ?? "";
  $("api-key").focus();
}

async function signIn(key) {
  try {
    api = await Api.signIn(key);
  } catch (error) {
    forgetKey();
    const expired = error instanceof ApiError && error.status === 401;
    showSignIn(expired ? "This API key is unknown or revoked." : error.message);
    return;
  }
  api.onUnauthorized = () => {
    forgetKey();
    showSignIn("The API key is no longer valid; sign in again.");
  };
  showSignedIn();
}

$("sign-in-form").addEventListener("submit", (event) => {
  event.preventDefault();
  const input = $("api-key");
  const key = input.value.trim();
  input.value = "";
  signIn(key);
});

$("sign-out").addEventListener("click", () => {
  forgetKey();
  showSignIn();
});

window.addEventListener("hashchange", render);

const key = storedKey();
if (key) signIn(key);
else showSignIn();
