use super::*;

#[test]
fn csv_with_names_maps_through_sorted_classes() {
    let d = Dataset::parse_manifest(
        "key,label\nb/1.jpg,dog\na/2.jpg,cat\n\n# note\nc.jpg,dog\n",
        ManifestSyntax::Csv,
    )
    .unwrap();
    assert_eq!(d.classes(), ["cat", "dog"]);
    let labels: Vec<i64> = d.iter().map(|i| i.label.class().unwrap_or(-1)).collect();
    assert_eq!(labels, [1, 0, 1]);
}

#[test]
fn integer_labels_are_kept() {
    let d = Dataset::parse_manifest(
        "{\"key\":\"x.jpg\",\"label\":7}\n{\"key\":\"y.jpg\",\"label\":-1}",
        ManifestSyntax::JsonLines,
    )
    .unwrap();
    assert!(d.classes().is_empty());
    assert_eq!(d.get(0).unwrap().label, 7);
}

#[test]
fn manifests_without_labels_label_nothing() {
    let labels = |d: Dataset| d.iter().map(|i| i.label).collect::<Vec<_>>();
    let d = Dataset::parse_manifest("{\"key\":\"a\",\"class\":3}\n", ManifestSyntax::JsonLines)
        .unwrap();
    assert!(
        d.has_labels() && d.get(0).unwrap().label == 3,
        "\"class\" as CSV's header says"
    );
    for (text, format) in [
        ("a.npy\nb.npy\n", ManifestSyntax::Csv),
        ("key\na.npy\nb.npy\n", ManifestSyntax::Csv),
        (
            "{\"key\":\"a.npy\"}\n{\"key\":\"b.npy\",\"label\":null}\n",
            ManifestSyntax::JsonLines,
        ),
    ] {
        let d = Dataset::parse_manifest(text, format).unwrap();
        assert!(!d.has_labels(), "{text}");
        assert_eq!(labels(d), [-1, -1], "{text}");
    }
    let d = Dataset::parse_manifest(
        "path,offset,length\np.bin,0,4\np.bin,4,4\n",
        ManifestSyntax::Csv,
    )
    .unwrap();
    assert_eq!(d.get(1).unwrap().range, Some(4..8));
    // A label forgotten on some lines only is an error, not a sample labelled -1.
    let err = |text, format| {
        Dataset::parse_manifest(text, format)
            .unwrap_err()
            .to_string()
    };
    assert_eq!(
        err("a.jpg\nb.jpg,3\n", ManifestSyntax::Csv),
        "line 2: expected key alone (as the first row) (1 fields) but found 2; quote a key \
         that holds a comma: \"b.jpg,3\""
    );
    assert_eq!(
        err(
            "{\"key\":\"a\",\"label\":1}\n{\"key\":\"b\"}\n{\"key\":\"c\",\"label\":2}\n",
            ManifestSyntax::JsonLines
        ),
        "line 2: no label, but the other lines have one"
    );
    // A label under a name that is not read is not "no label".
    assert!(
        err(
            "{\"key\":\"a\",\"target\":0.5}\n",
            ManifestSyntax::JsonLines
        )
        .contains("\"target\" is not a label key"),
    );
    let classes = ["cat".to_owned()];
    let err = Dataset::parse_manifest_with_classes("a.jpg\n", ManifestSyntax::Csv, &classes)
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("no label, but the labels must be classes"),
        "{err}"
    );
}

#[test]
fn errors_name_the_line() {
    for (text, format, needle) in [
        (
            "a.jpg,1\nb.jpg\n",
            ManifestSyntax::Csv,
            "line 2: expected key,label (2 fields) but found 1",
        ),
        (
            "a.jpg,1\na.jpg,2\n",
            ManifestSyntax::Csv,
            "line 2: key \"a.jpg\" was already listed on line 1",
        ),
        (
            "a.jpg,\n",
            ManifestSyntax::Csv,
            "line 1: the label is empty",
        ),
        (
            "../x.jpg,1\n",
            ManifestSyntax::Csv,
            "line 1: the key has a '.' or '..' segment",
        ),
        (
            "{\"key\":\"a\",\"label\":1}\n{bad json\n",
            ManifestSyntax::JsonLines,
            "line 2: not JSON",
        ),
        (
            "{\"key\":\"a\",\"label\":1}\n{\"key\":\"b\",\"label\":\"cat\"}\n",
            ManifestSyntax::JsonLines,
            "line 2: label \"cat\" is not an integer",
        ),
        (
            "{\"key\":\"a\",\"label\":1.5}\n",
            ManifestSyntax::JsonLines,
            "line 1: label 1.5 is not an integer",
        ),
        ("\n# nothing\n", ManifestSyntax::Csv, "lists no samples"),
    ] {
        let err = Dataset::parse_manifest(text, format)
            .unwrap_err()
            .to_string();
        assert!(err.contains(needle), "{text:?}: {err}");
    }
}

// Defect 4: a header naming other columns became a sample, and its "label" a class
// that shifted every other label.
#[test]
fn csv_headers_are_recognised_by_their_column_names_or_refused() {
    for text in [
        "path,label\na.jpg,2\nb.jpg,10\n",
        "\u{feff}path,label\na.jpg,2\nb.jpg,10\n",
        "key, label\na.jpg,2\nb.jpg,10\n",
        "FILE,Class\na.jpg,2\nb.jpg,10\n",
        "\u{feff}a.jpg,2\nb.jpg,10\n",
        "\"a.jpg\",2\r\nb.jpg,10\r\n",
    ] {
        let d = Dataset::parse_manifest(text, ManifestSyntax::Csv)
            .unwrap_or_else(|e| panic!("{text:?}: {e}"));
        let got: Vec<(String, i64)> = d
            .iter()
            .map(|i| (i.key.to_string(), i.label.class().unwrap_or(-1)))
            .collect();
        assert_eq!(got, [("a.jpg".into(), 2), ("b.jpg".into(), 10)], "{text:?}");
        assert!(d.classes().is_empty(), "{text:?}");
    }
    // A header with the columns the other way round.
    let d = Dataset::parse_manifest("label,path\n2,a.jpg\n", ManifestSyntax::Csv).unwrap();
    assert_eq!(
        (&*d.get(0).unwrap().key, d.get(0).unwrap().label.class()),
        ("a.jpg", Some(2))
    );
    // Quoted keys may hold commas.
    let d = Dataset::parse_manifest("\"a,b.jpg\",cat\n", ManifestSyntax::Csv).unwrap();
    assert_eq!(&*d.get(0).unwrap().key, "a,b.jpg");
    for (text, needle) in [
        // One typo in an integer label: not a class name among numbers.
        ("a.jpg,2\nb.jpg,1O\nc.jpg,3\n", "line 2"),
        ("a.jpg,cat\nb.jpg,3\n", "line 2"),
        // A first row that is neither data nor a header naming the columns.
        ("filename,target\na.jpg,2\nb.jpg,3\n", "line 1"),
        ("a.jpg,2,extra\n", "line 1"),
        ("path,label\na.jpg\n", "line 2"),
    ] {
        let err = Dataset::parse_manifest(text, ManifestSyntax::Csv)
            .map(|d| format!("parsed as {:?}", d.iter().collect::<Vec<_>>()))
            .unwrap_or_else(|e| e.to_string());
        assert!(err.contains(needle), "{text:?}: {err}");
    }
}

// Issue 25, defect 4: float labels became classes sorted as text ("0.5" -> class 0,
// "1.0" -> class 1, "10.0" -> class 1 too), silently.
#[test]
fn float_labels_are_refused_not_read_as_class_names() {
    for (text, format, needle) in [
        (
            "a.jpg,0.5\nb.jpg,1.0\n",
            ManifestSyntax::Csv,
            "line 1: label \"0.5\"",
        ),
        (
            "a.jpg,1\nb.jpg,2.0\n",
            ManifestSyntax::Csv,
            "line 2: label \"2.0\"",
        ),
        (
            "key,label\na.jpg,1e-3\n",
            ManifestSyntax::Csv,
            "line 2: label \"1e-3\"",
        ),
        ("a.jpg,-.5\n", ManifestSyntax::Csv, "line 1: label \"-.5\""),
        (
            "{\"key\":\"a\",\"label\":\"0.25\"}\n",
            ManifestSyntax::JsonLines,
            "line 1: label \"0.25\"",
        ),
        (
            "{\"key\":\"a\",\"label\":2.0}\n",
            ManifestSyntax::JsonLines,
            "line 1: label 2.0 is not an integer",
        ),
    ] {
        let err = Dataset::parse_manifest(text, format)
            .map(|d| {
                format!(
                    "parsed as {:?} {:?}",
                    d.iter().collect::<Vec<_>>(),
                    d.classes()
                )
            })
            .unwrap_or_else(|e| e.to_string());
        assert!(err.contains(needle), "{text:?}: {err}");
        assert!(err.contains("not an integer"), "{text:?}: {err}");
    }
    // Words that parse as floats are class names, as before.
    let d = Dataset::parse_manifest("a.jpg,inf\nb.jpg,nan\n", ManifestSyntax::Csv).unwrap();
    assert_eq!(d.classes(), ["inf", "nan"]);
}

fn parsed(text: &str, format: ManifestSyntax, kind: LabelKind) -> Result<Vec<Label>> {
    let d = Dataset::parse_manifest_as(text, format, kind, None)?;
    Ok(d.iter().map(|i| i.label).collect())
}

fn failed(text: &str, format: ManifestSyntax, kind: LabelKind) -> String {
    match parsed(text, format, kind) {
        Ok(labels) => panic!("{text:?} read as {labels:?}"),
        Err(e) => e.to_string(),
    }
}

#[test]
fn values_manifests_give_numbers_and_lists_of_one_length() {
    use ManifestSyntax::{Csv, JsonLines};
    let values = |v: &[f32]| Label::Values(v.into());
    assert_eq!(
        parsed(
            "path,label
a.npy,0.5
b.npy,-2
c.npy,1e-3
",
            Csv,
            LabelKind::Values
        )
        .unwrap(),
        [Label::Value(0.5), Label::Value(-2.0), Label::Value(1e-3)]
    );
    assert_eq!(
        parsed(
            "a.npy,0.1 0.9
b.npy,1 0
",
            Csv,
            LabelKind::Values
        )
        .unwrap(),
        [values(&[0.1, 0.9]), values(&[1.0, 0.0])]
    );
    assert_eq!(
        parsed(
            "{\"key\":\"a\",\"label\":[0.25,0.75]}\n{\"key\":\"b\",\"label\":[1,0]}\n",
            JsonLines,
            LabelKind::Values
        )
        .unwrap(),
        [values(&[0.25, 0.75]), values(&[1.0, 0.0])]
    );
    assert_eq!(
        parsed(
            "{\"key\":\"a\",\"label\":3}\n",
            JsonLines,
            LabelKind::Values
        )
        .unwrap(),
        [Label::Value(3.0)],
        "integers are numbers when the manifest says its labels are values"
    );
    for (text, format, needle) in [
        (
            "a,0.1 0.9\nb,1 0 0\n",
            Csv,
            "line 2: 3 numbers, but line 1 has 2",
        ),
        (
            "a,0.5\nb,0.1 0.9\n",
            Csv,
            "line 2: label \"[0.1, 0.9]\" is not the kind of line 1",
        ),
        ("a,cat\n", Csv, "line 1: label \"cat\" is not a number"),
        ("a,1e39\n", Csv, "not a finite 32-bit float"),
        ("a,nan\n", Csv, "label \"nan\" is not a number"),
        ("key,label\na,\n", Csv, "line 2: the label is empty"),
        (
            "{\"key\":\"a\",\"label\":[]}\n",
            JsonLines,
            "line 1: the label is an empty list",
        ),
        (
            "{\"key\":\"a\",\"label\":\"0.5\"}\n",
            JsonLines,
            "is not a number or a list",
        ),
        (
            "{\"key\":\"a\"}\n",
            JsonLines,
            "line 1: no label, but the labels are read as numbers",
        ),
    ] {
        let err = failed(text, format, LabelKind::Values);
        assert!(err.contains(needle), "{text:?}: {err}");
    }
}

#[test]
fn multi_label_manifests_give_sets_of_classes() {
    use ManifestSyntax::{Csv, JsonLines};
    let set = |of: u32, i: &[u32]| {
        Label::Classes(ClassSet {
            indices: i.into(),
            of,
        })
    };
    let d = Dataset::parse_manifest_as(
        "key,label\na.jpg,dog cat\nb.jpg,\nc.jpg,bird;dog|dog\n",
        Csv,
        LabelKind::MultiLabel,
        None,
    )
    .unwrap();
    assert_eq!(d.classes(), ["bird", "cat", "dog"]);
    let labels: Vec<Label> = d.iter().map(|i| i.label).collect();
    assert_eq!(labels, [set(3, &[1, 2]), set(3, &[]), set(3, &[0, 2])]);
    assert_eq!(
        parsed(
            "{\"key\":\"a\",\"label\":[4,1]}\n{\"key\":\"b\",\"label\":[]}\n{\"key\":\"c\",\"label\":0}\n",
            JsonLines,
            LabelKind::MultiLabel
        )
        .unwrap(),
        [set(5, &[1, 4]), set(5, &[]), set(5, &[0])],
        "indices as they are, below one more than the largest"
    );
    // A class list fixes the width and the names; "7" is a name when there is one.
    let classes: Vec<String> = ["cat", "dog", "7"].map(String::from).to_vec();
    let d = Dataset::parse_manifest_as(
        "a,dog 7\nb,cat\n",
        Csv,
        LabelKind::MultiLabel,
        Some(&classes),
    )
    .unwrap();
    let labels: Vec<Label> = d.iter().map(|i| i.label).collect();
    assert_eq!(labels, [set(3, &[1, 2]), set(3, &[0])]);
    for (text, format, classes, needle) in [
        (
            "a,cat 1\n",
            Csv,
            None,
            "line 1: label 1 is a class index, but other labels name classes",
        ),
        (
            "a,1\nb,cat\n",
            Csv,
            None,
            "line 1: label 1 is a class index",
        ),
        (
            "a,0.5\n",
            Csv,
            None,
            "line 1: label \"0.5\" is a number but not an integer",
        ),
        ("a,-1\n", Csv, None, "line 1: label -1 is not a class index"),
        ("a,\n", Csv, None, "no line gives a class"),
        (
            "a,1\nb,4000000000\n",
            Csv,
            None,
            "line 2: class index 4000000000 would make",
        ),
        (
            "{\"key\":\"a\",\"label\":[7,\"7\"]}\n",
            JsonLines,
            None,
            "label 7 is a class index, but other labels name classes",
        ),
        (
            "{\"key\":\"a\",\"label\":[\"0 1\"]}\n",
            JsonLines,
            None,
            "give each class as an element of the list",
        ),
        (
            "a,cow\n",
            Csv,
            Some(&classes),
            "line 1: unknown label \"cow\"",
        ),
        (
            "a,3\n",
            Csv,
            Some(&classes),
            "line 1: label 3 is not a class index below 3",
        ),
        (
            "{\"key\":\"a\",\"label\":[[1]]}\n",
            JsonLines,
            None,
            "is a list inside a list",
        ),
        (
            "{\"key\":\"a\"}\n",
            JsonLines,
            None,
            "line 1: no label, but the labels are read as sets",
        ),
    ] {
        let err = match Dataset::parse_manifest_as(
            text,
            format,
            LabelKind::MultiLabel,
            classes.map(|c| c.as_slice()),
        ) {
            Ok(d) => panic!("{text:?} read as {:?}", d.iter().collect::<Vec<_>>()),
            Err(e) => e.to_string(),
        };
        assert!(err.contains(needle), "{text:?}: {err}");
    }
}

#[test]
fn lists_and_numbers_under_class_labels_say_which_kind_reads_them() {
    let err = failed(
        "{\"key\":\"a\",\"label\":[1,2]}\n",
        ManifestSyntax::JsonLines,
        LabelKind::Class,
    );
    assert!(err.contains("the label is a list; read several classes per sample as LabelKind::MultiLabel (Python: labels=\"multi\")"), "{err}");
    for text in [
        "a,0 1\n",
        "a,1 2.5\n",
        "{\"key\":\"a\",\"label\":\"3 4\"}\n",
    ] {
        let format = ManifestSyntax::from_name(if text.starts_with('{') {
            "m.jsonl"
        } else {
            "m.csv"
        });
        let err = failed(text, format, LabelKind::Class);
        assert!(err.contains("is a list of numbers, not a class"), "{err}");
    }
    let d = Dataset::parse_manifest("a,golden retriever\nb,2 x\n", ManifestSyntax::Csv).unwrap();
    assert_eq!(
        d.classes(),
        ["2 x", "golden retriever"],
        "names with spaces stay names"
    );
    let err = failed("a,0.5\n", ManifestSyntax::Csv, LabelKind::Class);
    assert!(
        err.contains("LabelKind::Values (Python: labels=\"values\")"),
        "{err}"
    );
    assert_eq!(LabelKind::from_name("Multi"), Some(LabelKind::MultiLabel));
    assert_eq!(LabelKind::from_name("floats"), None);
}

#[test]
fn labels_outside_a_known_class_list_are_errors_with_the_line() {
    let classes: Vec<String> = ["cat", "dog"].map(String::from).to_vec();
    let d = Dataset::parse_manifest_with_classes(
        "a.jpg,dog\nb.jpg,cat\n",
        ManifestSyntax::Csv,
        &classes,
    )
    .unwrap();
    assert_eq!(d.classes(), classes);
    assert_eq!(d.get(0).unwrap().label, 1);
    // Only dogs: still indexed against both classes, not a class list of one.
    let d =
        Dataset::parse_manifest_with_classes("a.jpg,dog\n", ManifestSyntax::Csv, &classes).unwrap();
    assert_eq!(d.get(0).unwrap().label, 1);
    let d =
        Dataset::parse_manifest_with_classes("a.jpg,1\n", ManifestSyntax::Csv, &classes).unwrap();
    assert_eq!(d.get(0).unwrap().label, 1);
    for (text, format, needle) in [
        (
            "a.jpg,dog\nb.jpg,cow\n",
            ManifestSyntax::Csv,
            "line 2: unknown label \"cow\"; the classes are cat, dog (2 classes)",
        ),
        (
            "a.jpg,0\nb.jpg,2\n",
            ManifestSyntax::Csv,
            "line 2: label 2 is not a class index",
        ),
        (
            "{\"key\":\"a\",\"label\":-1}\n",
            ManifestSyntax::JsonLines,
            "line 1: label -1 is not a class index",
        ),
        (
            "{\"key\":\"a\",\"label\":\"bird\"}\n",
            ManifestSyntax::JsonLines,
            "line 1: unknown label \"bird\"",
        ),
    ] {
        let err = Dataset::parse_manifest_with_classes(text, format, &classes)
            .unwrap_err()
            .to_string();
        assert!(err.contains(needle), "{text:?}: {err}");
    }
    assert!(Dataset::parse_manifest_with_classes("a,1", ManifestSyntax::Csv, &[]).is_err());
}

#[test]
fn offset_and_length_columns_make_ranged_samples_of_packed_files() {
    let csv = "key,label,offset,length\npack.bin,0,0,10\npack.bin,1,10,5\n";
    let json = "{\"key\":\"pack.bin\",\"label\":0,\"offset\":0,\"length\":10}\n\
                {\"key\":\"pack.bin\",\"label\":1,\"offset\":10,\"length\":5}\n";
    for (text, format) in [
        (csv, ManifestSyntax::Csv),
        (json, ManifestSyntax::JsonLines),
    ] {
        let d = Dataset::parse_manifest(text, format).unwrap();
        let got: Vec<_> = d
            .iter()
            .map(|i| (i.key.to_string(), i.range, i.label.class().unwrap_or(-1)))
            .collect();
        assert_eq!(
            got,
            [
                ("pack.bin".into(), Some(0..10), 0),
                ("pack.bin".into(), Some(10..15), 1)
            ],
            "{format:?}"
        );
    }
    // Columns in another order.
    let d = Dataset::parse_manifest("length,path,class,offset\n4,p,7,100\n", ManifestSyntax::Csv)
        .unwrap();
    assert_eq!(
        (
            d.get(0).unwrap().range.clone(),
            d.get(0).unwrap().label.clone()
        ),
        (Some(100..104), Label::Class(7))
    );
    for (text, format, needle) in [
        (
            "key,label,offset,length\np,0,0,10\np,1,0,10\n",
            ManifestSyntax::Csv,
            "line 3: key \"p\" bytes 0..10 was already listed on line 2",
        ),
        (
            "key,label,offset,length\np,0,x,10\n",
            ManifestSyntax::Csv,
            "line 2: the offset is not a whole number",
        ),
        (
            "key,label,offset,length\np,0,10\n",
            ManifestSyntax::Csv,
            "line 2: expected key,label,offset,length (4 fields)",
        ),
        (
            "{\"key\":\"p\",\"label\":0,\"offset\":3}\n",
            ManifestSyntax::JsonLines,
            "line 1: give both offset and length",
        ),
    ] {
        let err = Dataset::parse_manifest(text, format)
            .unwrap_err()
            .to_string();
        assert!(err.contains(needle), "{text:?}: {err}");
    }
}

#[test]
fn manifests_are_read_from_the_store_and_must_be_utf8() {
    #![allow(clippy::unwrap_used)]
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("m.csv"), "a.jpg,dog\nb.jpg,cat\n").unwrap();
    std::fs::write(dir.path().join("bad.csv"), b"a.jpg,\xff\n").unwrap();
    let store = loader_storage::from_url(
        &dir.path().to_string_lossy(),
        Vec::<(String, String)>::new(),
    )
    .unwrap();
    let d = Dataset::manifest_blocking(&*store, "m.csv").unwrap();
    assert_eq!(d.classes(), ["cat", "dog"]);
    let classes = ["dog".to_owned(), "cat".to_owned()];
    let fixed =
        block_on_own_thread(|| Dataset::manifest_with_classes(&*store, "m.csv", &classes)).unwrap();
    let labels: Vec<i64> = fixed
        .iter()
        .map(|i| i.label.class().unwrap_or(-1))
        .collect();
    assert_eq!(labels, [0, 1]);
    let err = Dataset::manifest_blocking(&*store, "bad.csv")
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("\"bad.csv\"") && err.contains("not UTF-8"),
        "{err}"
    );
    assert!(err.contains(store.name()), "{err}");
}
