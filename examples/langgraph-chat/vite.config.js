import { defineConfig } from "vite";
import react from "@vitejs/plugin-react";
import { DEV_PORT, HOST, SESSION_URL } from "../chat/config.js";

// As examples/chat: `npm run dev` serves the page on DEV_PORT and hands /session to the session
// endpoint (examples/chat's, serving this page's dist/), so runq is the only other origin.
export default defineConfig({
  plugins: [react()],
  server: {
    host: HOST,
    port: DEV_PORT,
    strictPort: true,
    proxy: { "/session": SESSION_URL },
    fs: { allow: [".."] }, // the session client shared with examples/chat
  },
});
