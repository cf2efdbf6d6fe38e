#![allow(clippy::unwrap_used)] // tests may unwrap: a panic is the failure report

//! The `loader` binary, run as a user would.

mod common;

use std::io::{BufRead, BufReader, Read, Write};
use std::process::Stdio;
use std::time::{Duration, Instant};

use common::{loader, ok, tiny_folder};

#[test]
fn argument_errors_give_a_message_and_a_failing_exit() {
    for args in [
        &["frobnicate"][..],
        &["run"][..],
        &["bench", "--rtts", "ten"][..],
        &["bench", "--strategies", "magic"][..],
        &["serve", "ftp", "."][..],
    ] {
        let out = loader().args(args).output().unwrap();
        assert!(!out.status.success(), "{args:?} succeeded");
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(
            stderr.contains("error") || stderr.contains("Usage"),
            "{args:?}: {stderr}"
        );
    }
    // A bad URL is the command's own error, named.
    let out = loader().args(["run", "ftp://nowhere/x"]).output().unwrap();
    assert!(!out.status.success());
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("unknown scheme"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

#[test]
fn bench_runs_a_tiny_matrix_end_to_end() {
    let data = tempfile::tempdir().unwrap();
    let out_dir = tempfile::tempdir().unwrap();
    let out = ok(loader()
        .args([
            "bench",
            "--tiny",
            "--images",
            "24",
            "--classes",
            "3",
            "--rtts",
            "0,20",
            "--strategies",
            "sequential,async",
        ])
        .args([
            "--seconds",
            "3",
            "--max-images",
            "24",
            "--batch-size",
            "8",
            "--json",
        ])
        .arg("--data")
        .arg(data.path())
        .arg("--out")
        .arg(out_dir.path()));
    let json: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let cells = json["cells"].as_array().unwrap();
    assert_eq!(cells.len(), 6, "local + 2 RTTs, 2 strategies each");
    let runs = json["one_core_pipeline_runs"].as_array().unwrap();
    assert_eq!(
        runs.len(),
        7,
        "the ceiling before the first cell and after each of 6"
    );
    let ceiling = json["one_core_pipeline_images_per_sec"].as_f64().unwrap();
    let (low, high) = runs
        .iter()
        .map(|r| r.as_f64().unwrap())
        .fold((f64::INFINITY, 0f64), |(l, h), r| (l.min(r), h.max(r)));
    assert!(
        low <= ceiling && ceiling <= high,
        "{ceiling} outside {low}-{high}"
    );
    for cell in cells {
        assert!(cell["images"].as_u64().unwrap() >= 8, "{cell}");
        assert!(cell["images_per_sec"].as_f64().unwrap() > 0.0);
        // Efficiency is taken against the ceiling measured beside the cell.
        let beside = cell["one_core_images_per_sec"].as_f64().unwrap();
        assert!(low <= beside && beside <= high, "{cell}");
        let cores = json["cores"].as_f64().unwrap();
        let want = cell["images_per_sec"].as_f64().unwrap() / (cores * beside);
        assert!(
            (cell["efficiency"].as_f64().unwrap() - want).abs() < 1e-9,
            "{cell}"
        );
    }
    let at20 = cells
        .iter()
        .find(|c| c["rtt_ms"] == 20 && c["strategy"] == "async")
        .unwrap();
    assert!(at20["latency_hiding"].as_f64().is_some());
    for file in ["report.md", "results.json", "plot.svg"] {
        let len = std::fs::metadata(out_dir.path().join(file)).unwrap().len();
        assert!(len > 100, "{file} is {len} bytes");
    }
    let svg = std::fs::read_to_string(out_dir.path().join("plot.svg")).unwrap();
    assert!(svg.contains("<svg") && svg.contains("async"));
}

/// Start `loader serve ...` and read its announced endpoint (and S3 keys).
fn serve(args: &[&str]) -> (std::process::Child, Vec<String>) {
    let mut child = loader()
        .arg("serve")
        .args(args)
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let stdout = child.stdout.take().unwrap();
    let mut lines = Vec::new();
    let start = Instant::now();
    for line in BufReader::new(stdout).lines() {
        let line = line.unwrap();
        let done = line.starts_with("press Ctrl-C");
        lines.push(line);
        if done || start.elapsed() > Duration::from_secs(30) {
            break;
        }
    }
    (child, lines)
}

fn field(lines: &[String], name: &str) -> String {
    lines
        .iter()
        .find_map(|l| l.strip_prefix(name))
        .unwrap_or_else(|| panic!("no {name} in {lines:?}"))
        .trim()
        .to_owned()
}

#[test]
fn serve_http_answers_a_get() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("hello.txt"), b"hello from loader").unwrap();
    let (mut child, lines) = serve(&["http", dir.path().to_str().unwrap(), "--rtt", "10"]);
    let endpoint = field(&lines, "endpoint:");
    let addr = endpoint.trim_start_matches("http://");
    let mut socket = std::net::TcpStream::connect(addr).unwrap();
    socket
        .set_read_timeout(Some(Duration::from_secs(30)))
        .unwrap();
    write!(
        socket,
        "GET /hello.txt HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n"
    )
    .unwrap();
    let mut response = String::new();
    socket.read_to_string(&mut response).unwrap();
    child.kill().unwrap();
    child.wait().unwrap();
    assert!(response.starts_with("HTTP/1.1 200"), "{response}");
    assert!(response.ends_with("hello from loader"), "{response}");
}

#[test]
fn serve_s3_answers_a_signed_get() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::create_dir(dir.path().join("data")).unwrap();
    std::fs::write(dir.path().join("data/x.bin"), b"payload").unwrap();
    let (mut child, lines) = serve(&["s3", dir.path().to_str().unwrap()]);
    let options = [
        ("aws_endpoint", field(&lines, "endpoint:")),
        ("aws_access_key_id", field(&lines, "access key:")),
        ("aws_secret_access_key", field(&lines, "secret key:")),
    ];
    assert_eq!(field(&lines, "buckets:"), "data");
    let store = loader_core::from_url("s3://data", options).unwrap();
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let got = runtime.block_on(store.get("x.bin"));
    // Writes, signed with the right keys, are refused: a command for trying things must
    // not let a client delete the user's folder.
    let writer = object_store::aws::AmazonS3Builder::new()
        .with_bucket_name("data")
        .with_endpoint(field(&lines, "endpoint:"))
        .with_allow_http(true)
        .with_region("us-east-1")
        .with_access_key_id(field(&lines, "access key:"))
        .with_secret_access_key(field(&lines, "secret key:"))
        .with_virtual_hosted_style_request(false)
        .build()
        .unwrap();
    let path = object_store::path::Path::from("x.bin");
    let deleted = runtime.block_on(object_store::ObjectStoreExt::delete(&writer, &path));
    let put = runtime.block_on(object_store::ObjectStoreExt::put(
        &writer,
        &object_store::path::Path::from("new.bin"),
        object_store::PutPayload::from_static(b"x"),
    ));
    child.kill().unwrap();
    child.wait().unwrap();
    assert_eq!(got.unwrap().as_ref(), b"payload");
    assert!(deleted.is_err() && put.is_err(), "{deleted:?} {put:?}");
    assert!(dir.path().join("data/x.bin").exists());
    assert!(!dir.path().join("data/new.bin").exists());
    assert!(
        lines
            .iter()
            .any(|l| l.contains("read-only") && l.contains("loopback")),
        "{lines:?}"
    );
}

#[test]
fn run_iterates_a_dataset_and_writes_a_chrome_trace() {
    let data = tempfile::tempdir().unwrap();
    tiny_folder(data.path(), 20, 2);
    let trace = data.path().join("trace.json");
    let out = ok(loader()
        .arg("run")
        .arg(data.path().to_str().unwrap())
        .args(["--batch-size", "5", "--epochs", "2", "--json", "--trace"])
        .arg(&trace));
    let summary: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(summary["images"], 40);
    assert!(
        summary["bottleneck"]
            .as_str()
            .unwrap()
            .starts_with("bottleneck:")
    );
    let events: serde_json::Value =
        serde_json::from_slice(&std::fs::read(&trace).unwrap()).unwrap();
    let events = events["traceEvents"].as_array().unwrap();
    let count = |name: &str| events.iter().filter(|e| e["name"] == name).count();
    // The engine runs ahead into a third epoch before it is dropped, so "at least".
    assert!(count("decode") >= 40, "{} decodes", count("decode"));
    assert!(
        count("fetch") >= 80 && count("fetch") % 2 == 0,
        "a begin and an end per fetch"
    );
    assert!(count("batch ready") >= 8);
}

/// A token dataset (megatron-core's files) read with `--block-size`: blocks and tokens
/// counted, tokens per second reported, and without the flag an error naming it.
#[test]
fn run_reads_a_token_dataset_given_a_block_size() {
    let data = tempfile::tempdir().unwrap();
    let fixtures =
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../core/tests/fixtures/megatron");
    for ext in ["idx", "bin"] {
        std::fs::copy(
            fixtures.join(format!("u16.{ext}")),
            data.path().join(format!("u16.{ext}")),
        )
        .unwrap();
    }
    let url = data.path().to_str().unwrap();
    let out = ok(loader()
        .args(["run", url, "--block-size", "32", "--batch-size", "4"])
        .args(["--shuffle", "--json"]));
    let summary: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    // 1,342 tokens: 41 blocks of 32 (+1 for the labels), each trained on 32.
    assert_eq!(summary["images"], 41, "{summary}");
    assert_eq!(summary["tokens"], 41 * 32, "{summary}");
    assert!(summary["tokens_per_sec"].as_f64().unwrap() > 0.0);
    let out = loader().args(["run", url]).output().unwrap();
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("--block-size"), "{stderr}");
}

// Defect 6, the command line: `--json`, progress lines and errors show the store's name,
// never the URL as typed, whose user info or query may hold credentials.
#[test]
fn run_never_prints_the_credentials_of_its_url() {
    let data = tempfile::tempdir().unwrap();
    let generated = loader()
        .arg("gen")
        .arg(data.path())
        .args(["--images", "6", "--classes", "2", "--tiny"])
        .output()
        .unwrap();
    assert!(generated.status.success());
    let listing: Vec<String> = ["class_000", "class_001"]
        .iter()
        .flat_map(|class| {
            std::fs::read_dir(data.path().join(class))
                .unwrap()
                .map(move |e| format!("{class}/{},0", e.unwrap().file_name().to_string_lossy()))
        })
        .collect();
    std::fs::write(data.path().join("m.csv"), listing.join("\n")).unwrap();
    let http = loader_testkit::HttpServer::start(data.path()).unwrap();
    for url in [
        format!("{}/?X-Amz-Signature=sekrit", http.url()),
        format!("http://user:sekrit@{}/", http.addr()),
        "s3://AKIDEXAMPLE:sekrit/XUtnFEMI@bucket/p".to_owned(),
    ] {
        let out = loader()
            .arg("run")
            .arg(&url)
            .args(["--manifest", "m.csv", "--batch-size", "3", "--json"])
            .output()
            .unwrap();
        let shown = format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        for secret in ["sekrit", "AKIDEXAMPLE", "XUtnFEMI"] {
            assert!(!shown.contains(secret), "{url}: {shown}");
        }
    }
}

/// `loader tokenize` over a JSON-lines corpus with a byte-level BPE that Hugging Face's
/// `tokenizers` package trained (fixtures/tokenize/make.py): every document's ids, with
/// `<|endoftext|>` appended, are the package's own, read back through the Megatron reader;
/// then `loader run` reads the dataset. A tokenizer that does not load, an unknown end
/// token and a line without its text field are errors naming the file and the cause.
#[test]
fn tokenize_writes_the_ids_the_tokenizers_package_gives() {
    let fixtures = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/tokenize");
    let expected: serde_json::Value =
        serde_json::from_slice(&std::fs::read(fixtures.join("expected.json")).unwrap()).unwrap();
    let out = tempfile::tempdir().unwrap();
    let prefix = out.path().join("corpus");
    let (corpus, tokenizer) = (
        fixtures.join("corpus.jsonl"),
        fixtures.join("tokenizer.json"),
    );
    ok(loader()
        .arg("tokenize")
        .arg(&corpus)
        .arg("--tokenizer")
        .arg(&tokenizer)
        .arg("--out")
        .arg(&prefix)
        .args(["--append-eos", "<|endoftext|>", "--batch", "7"]));
    let idx = std::fs::read(out.path().join("corpus.idx")).unwrap();
    let bin = std::fs::read(out.path().join("corpus.bin")).unwrap();
    let index = loader_core::source::megatron::parse_index(&idx, bin.len() as u64).unwrap();
    let ids: Vec<i64> = bin
        .chunks_exact(2)
        .map(|b| i64::from(u16::from_le_bytes([b[0], b[1]])))
        .collect();
    let want = expected["documents"].as_array().unwrap();
    assert_eq!(index.documents.len(), want.len());
    for (d, doc) in want.iter().enumerate() {
        let (start, end) = (index.documents.start(d), index.documents.start(d + 1));
        let want: Vec<i64> = doc
            .as_array()
            .unwrap()
            .iter()
            .map(|v| v.as_i64().unwrap())
            .collect();
        assert_eq!(ids[start as usize..end as usize], want, "document {d}");
    }
    let run = ok(loader()
        .arg("run")
        .arg(out.path())
        .args(["--block-size", "16", "--json"]));
    let summary: serde_json::Value = serde_json::from_slice(&run.stdout).unwrap();
    assert_eq!(
        summary["tokens"],
        (ids.len() as u64 - 1) / 16 * 16,
        "{summary}"
    );

    let bad = out.path().join("bad.json");
    std::fs::write(&bad, "{not a tokenizer").unwrap();
    let no_text = out.path().join("no-text.jsonl");
    std::fs::write(&no_text, "{\"text\": \"a\"}\n\n{\"body\": \"b\"}\n").unwrap();
    for (input, tokenizer, extra, needle) in [
        (&corpus, &bad, None, "bad.json"),
        (&corpus, &tokenizer, Some("<eos>"), "no such token"),
        (&no_text, &tokenizer, None, "no-text.jsonl line 3"),
    ] {
        let mut command = loader();
        command
            .arg("tokenize")
            .arg(input)
            .arg("--tokenizer")
            .arg(tokenizer)
            .arg("--out")
            .arg(out.path().join("x"));
        if let Some(token) = extra {
            command.args(["--append-eos", token]);
        }
        let result = command.output().unwrap();
        let stderr = String::from_utf8_lossy(&result.stderr);
        assert!(
            !result.status.success() && stderr.contains(needle),
            "{needle}: {stderr}"
        );
    }
    // The corpus and tokenizer read from S3, behind a delay proxy: the very same files.
    let root = out.path().join("s3");
    std::fs::create_dir_all(root.join("bucket")).unwrap();
    std::fs::copy(&corpus, root.join("bucket/corpus.jsonl")).unwrap();
    std::fs::copy(&tokenizer, root.join("bucket/tokenizer.json")).unwrap();
    let server = loader_testkit::S3Server::start(&root).unwrap();
    let proxy =
        loader_testkit::DelayProxy::start(server.addr(), Duration::from_millis(20)).unwrap();
    let mut command = loader();
    command.args([
        "tokenize",
        "s3://bucket/corpus.jsonl",
        "--tokenizer",
        "s3://bucket/tokenizer.json",
        "--append-eos",
        "<|endoftext|>",
        "--out",
    ]);
    command.arg(out.path().join("stored"));
    for (k, v) in server.options_for(&proxy.url()) {
        command.args(["--option", &format!("{k}={v}")]);
    }
    ok(&mut command);
    for ext in ["idx", "bin"] {
        assert_eq!(
            std::fs::read(out.path().join(format!("stored.{ext}"))).unwrap(),
            std::fs::read(out.path().join(format!("corpus.{ext}"))).unwrap(),
            "{ext}"
        );
    }
    // As MDS shards and LitData chunks (one chunk): the same documents, read back by the
    // loader's readers (MDS blocks as Megatron's; LitData's share no token).
    for (format, tokens) in [
        ("mds", (ids.len() as u64 - 1) / 16 * 16),
        ("litdata", ids.len() as u64 / 17 * 16),
    ] {
        let written = out.path().join(format);
        ok(loader()
            .arg("tokenize")
            .arg(&corpus)
            .arg("--tokenizer")
            .arg(&tokenizer)
            .arg("--out")
            .arg(&written)
            .args(["--append-eos", "<|endoftext|>", "--format", format]));
        let run = ok(loader()
            .arg("run")
            .arg(&written)
            .args(["--block-size", "16", "--json"]));
        let summary: serde_json::Value = serde_json::from_slice(&run.stdout).unwrap();
        assert_eq!(summary["tokens"], tokens, "{format}: {summary}");
    }
    // Settings it cannot honour: no batch, a store's URL that names no object.
    for (input, batch, needle) in [
        (corpus.to_string_lossy().into_owned(), "0", "--batch 0"),
        ("s3://bucket/".to_owned(), "8", "an object's URL"),
    ] {
        let result = loader()
            .args(["tokenize", &input, "--batch", batch, "--tokenizer"])
            .arg(&tokenizer)
            .arg("--out")
            .arg(out.path().join("x"))
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&result.stderr);
        assert!(
            !result.status.success() && stderr.contains(needle),
            "{needle}: {stderr}"
        );
    }
    // A LitData chunk size for another format would be unread: refused.
    let result = loader()
        .arg("tokenize")
        .arg(&corpus)
        .arg("--tokenizer")
        .arg(&tokenizer)
        .arg("--out")
        .arg(out.path().join("x"))
        .args(["--chunk-tokens", "100"])
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&result.stderr);
    assert!(
        !result.status.success() && stderr.contains("--format litdata"),
        "{stderr}"
    );
}
