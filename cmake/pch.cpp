// Precompiled-header anchor: tune_pch exists only to own the shared precompiled header.
