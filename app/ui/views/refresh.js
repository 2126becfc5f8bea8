// Calls load() now and then every `ms` while enabled: never two loads at once (a call to now()
// during a load runs one more right after it), and no timer left behind once the view is gone.

export function autoRefresh(load, ms) {
  let timer = null;
  let loading = null;
  let again = false;
  let enabled = true;
  let stopped = false;

  async function tick() {
    if (stopped) return;
    if (loading) {
      again = true;
      return loading;
    }
    clearTimeout(timer);
    loading = load().finally(() => {
      loading = null;
    });
    await loading;
    if (again) {
      again = false;
      return tick();
    }
    if (enabled && !stopped) timer = setTimeout(tick, ms);
  }

  tick();
  return {
    now: tick,
    stop() {
      stopped = true;
      clearTimeout(timer);
    },
    setEnabled(value) {
      enabled = value;
      if (enabled) tick();
      else clearTimeout(timer);
    },
  };
}
