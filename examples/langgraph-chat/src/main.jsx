import { createRoot } from "react-dom/client";
import App from "./App.jsx";
import "../../chat/src/styles.css";

// No StrictMode: its doubled effects in development would open two sessions (two threads).
createRoot(document.getElementById("root")).render(<App />);
