// The runq HTTP API as the signed-in operator sees it: the key lives in sessionStorage only.

const KEY_ITEM = "runq.key";

// An RFC 9457 problem answered by the API (or a network failure, status 0).
export class ApiError extends Error {
  constructor(status, code, detail) {
    super(detail || code || `HTTP ${status}`);
    this.status = status;
    this.code = code;
  }
}

export function storedKey() {
  return sessionStorage.getItem(KEY_ITEM);
}

export function forgetKey() {
  sessionStorage.removeItem(KEY_ITEM);
}

function query(params) {
  const pairs = Object.entries(params).filter(([, v]) => v !== undefined && v !== null && v !== "");
  return pairs.length ? `?${new URLSearchParams(pairs)}` : "";
}

export class Api {
  constructor(key) {
    this.key = key;
    this.isAdmin = false;
    this.onUnauthorized = () => {};
  }

  // Check the key and find out whether it is an admin's (a tenant key gets 403 on /admin).
  static async signIn(key) {
    const api = new Api(key);
    await api.request("GET", "/runs?limit=1");
    try {
      await api.request("GET", "/admin/stats");
      api.isAdmin = true;
    } catch (error) {
      if (!(error instanceof ApiError) || ![403, 404].includes(error.status)) throw error;
    }
    sessionStorage.setItem(KEY_ITEM, key);
    return api;
  }

  async request(method, path, body) {
    const headers = { Authorization: `Bearer ${this.key}`, Accept: "application/json" };
    if (body !== undefined) headers["Content-Type"] = "application/json";
    let response;
    try {
      response = await fetch(path, { method, headers, body: body === undefined ? undefined : JSON.stringify(body) });
    } catch (error) {
      throw new ApiError(0, "network_error", `the API cannot be reached (${error.message})`);
    }
    const data = await response.json().catch(() => null);
    if (!response.ok) {
      if (response.status === 401) this.onUnauthorized();
      throw new ApiError(response.status, data?.code, data?.detail);
    }
    return data;
  }

  listRuns({ status, tenant, cursor, limit = 50 } = {}) {
    if (this.isAdmin) return this.request("GET", `/admin/runs${query({ status, tenant, cursor, limit })}`);
    return this.request("GET", `/runs${query({ status, cursor, limit })}`);
  }

  run(id) {
    return this.request("GET", this.isAdmin ? `/admin/runs/${id}` : `/runs/${id}`);
  }

  createRun(body) {
    return this.request("POST", "/runs", body);
  }

  // A Stop (reason "user") with the key's own tenant; an admin stopping another tenant's run
  // goes through /admin (reason "operator").
  async cancel(id) {
    try {
      return await this.request("POST", `/runs/${id}/cancel`, {});
    } catch (error) {
      if (!(this.isAdmin && error instanceof ApiError && error.status === 404)) throw error;
      return this.request("POST", `/admin/runs/${id}/cancel`);
    }
  }

  requeue(id) {
    return this.request("POST", `/admin/runs/${id}/requeue`);
  }

  // scopes: ["read"] to follow the run, ["read", "resume"] also to answer its wait.
  async streamToken(id, scopes = ["read"]) {
    try {
      return await this.request("POST", `/runs/${id}/stream-token`, { scopes });
    } catch (error) {
      if (!(this.isAdmin && error instanceof ApiError && error.status === 404)) throw error;
      return this.request("POST", `/admin/runs/${id}/stream-token`, { scopes });
    }
  }

  stats() {
    return this.request("GET", "/admin/stats");
  }

  tenants() {
    return this.request("GET", "/admin/tenants?limit=200");
  }

  workers() {
    return this.request("GET", "/admin/workers");
  }

  deliveries(runId) {
    return this.request("GET", this.isAdmin ? `/admin/webhooks${query({ run_id: runId })}` : `/runs/${runId}/webhooks`);
  }

  schedules() {
    return this.request("GET", this.isAdmin ? "/admin/schedules" : "/schedules");
  }

  // Threads are the key's tenant's (an admin key sees its own tenant's conversations).
  threads({ cursor, limit = 50 } = {}) {
    return this.request("GET", `/threads${query({ cursor, limit })}`);
  }

  thread(id) {
    return this.request("GET", `/threads/${id}`);
  }

  threadMessages(id, { cursor, limit = 1000 } = {}) {
    return this.request("GET", `/threads/${id}/messages${query({ cursor, limit })}`);
  }

  threadRuns(id, { cursor, limit = 200 } = {}) {
    return this.request("GET", `/threads/${id}/runs${query({ cursor, limit })}`);
  }

  // A page of a run's stored events (the JSON form of GET /runs/{id}/events).
  events(id, { after = 0, limit = 1000 } = {}) {
    return this.request("GET", `/runs/${id}/events${query({ after, limit })}`);
  }
}
