"""uv is called one way (`vm/uv_settings.py`), by a run's requirements install and by the
boot's install alike: with the machine's certificate store and pip's index settings."""

from __future__ import annotations

import os
import shlex
import subprocess
from pathlib import Path

import pytest
from fake_index import serve_index
from fake_metadata import serve_metadata

from podmanager.controller.startup import render_startup_script, uv_settings_code
from podmanager.vm import environments
from podmanager.vm.uv_settings import (
    ARTIFACT_REGISTRY_USER,
    pip_config_files,
    uv_argv,
    uv_env,
    uv_settings,
    write_netrc,
)
from tests.controller.test_startup import software

CERTS = {"UV_SYSTEM_CERTS": "1", "UV_NATIVE_TLS": "1"}


def conf(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return path


def test_without_pip_settings_uv_gets_the_system_certificate_store() -> None:
    assert uv_settings({}, files=[]) == CERTS


def test_pips_variables_become_uvs() -> None:
    environ = {"PIP_INDEX_URL": "https://mirror/simple", "PIP_EXTRA_INDEX_URL": "https://a/simple  https://b/simple",
               "PIP_FIND_LINKS": "/w1 /w2", "PIP_CERT": "/etc/proxy ca.pem"}
    assert uv_settings(environ, files=[]) == {
        **CERTS, "UV_DEFAULT_INDEX": "https://mirror/simple", "UV_INDEX": "https://a/simple https://b/simple",
        "UV_INDEX_STRATEGY": "unsafe-best-match", "UV_FIND_LINKS": "/w1,/w2", "SSL_CERT_FILE": "/etc/proxy ca.pem"}
    # pip takes a version from any of its indexes; told otherwise for uv, that is kept.
    assert "UV_INDEX_STRATEGY" not in uv_settings({**environ, "UV_INDEX_STRATEGY": "first-index"}, files=[])


def test_pips_files_are_read_as_pip_reads_them(tmp_path: Path) -> None:
    system = conf(tmp_path / "etc" / "pip.conf", "[global]\nindex-url = https://global/simple\ncert = /ca.pem\n")
    user = conf(tmp_path / "user" / "pip.conf",
                "[global]\nindex_url = https://user/simple\n[install]\nextra-index-url =\n  https://x/simple\n"
                "  https://y/simple\n")
    broken = conf(tmp_path / "broken.conf", "index-url with no section\n")
    settings = uv_settings({}, files=[system, user, broken, tmp_path / "missing.conf"])
    # A later file over an earlier, [install] over [global], a broken or missing file skipped.
    assert settings == {**CERTS, "UV_DEFAULT_INDEX": "https://user/simple", "SSL_CERT_FILE": "/ca.pem",
                        "UV_INDEX": "https://x/simple https://y/simple", "UV_INDEX_STRATEGY": "unsafe-best-match"}
    # A PIP_* variable over every file.
    assert uv_settings({"PIP_INDEX_URL": "https://env/simple"}, files=[system, user])["UV_DEFAULT_INDEX"] \
        == "https://env/simple"


def test_what_the_user_set_for_uv_itself_is_kept() -> None:
    environ = {"PIP_INDEX_URL": "https://pip/simple", "UV_INDEX_URL": "https://uv/simple", "PIP_CERT": "/pip.pem",
               "SSL_CERT_FILE": "/mine.pem", "UV_SYSTEM_CERTS": "0"}
    assert uv_settings(environ, files=[]) == {}
    assert uv_env(environ, files=[]) == environ


def test_pips_files_are_found_where_pip_looks_and_none_with_config_file_devnull(tmp_path: Path) -> None:
    files = pip_config_files({"HOME": str(tmp_path), "PIP_CONFIG_FILE": "/srv/pip.conf"})
    assert Path("/etc/pip.conf") in files and tmp_path / ".config" / "pip" / "pip.conf" in files
    assert files[-1] == Path("/srv/pip.conf")  # read last: it wins
    assert pip_config_files({"PIP_CONFIG_FILE": os.devnull}) == []


def test_a_runs_requirements_install_calls_uv_with_the_settings(monkeypatch, tmp_path: Path) -> None:
    calls = []
    monkeypatch.setattr(environments.subprocess, "run",
                        lambda argv, **kw: calls.append((argv, kw["env"])) or subprocess.CompletedProcess(argv, 0, "", ""))
    monkeypatch.setenv("PIP_INDEX_URL", "https://proxy.example/simple")
    monkeypatch.delenv("UV_SYSTEM_CERTS", raising=False)
    environments._uv(["venv", str(tmp_path / "layer")], tmp_path)
    (argv, env), = calls
    assert argv[1:] == ["venv", str(tmp_path / "layer")]
    assert env["UV_SYSTEM_CERTS"] == "1" and env["UV_DEFAULT_INDEX"] == "https://proxy.example/simple"
    assert env["UV_CACHE_DIR"] == str(tmp_path / "uv")


def test_the_startup_script_runs_the_same_code_with_the_images_python(tmp_path: Path) -> None:
    script = render_startup_script("demo", software(), "demo-ray-token")
    assert f'python3 -c {shlex.quote(uv_settings_code())} --netrc "$INDEX_NETRC"' in script
    subprocess.run(["bash", "-n"], input=script, text=True, check=True)
    # What the script evaluates, run as it runs it: a pip.conf on the image becomes uv's settings.
    image_conf = conf(tmp_path / "pip.conf", "[global]\nindex-url = https://proxy.example/simple\n")
    done = subprocess.run(["bash", "-c", f'eval "$(python3 -c {shlex.quote(uv_settings_code())})"; '
                           'echo "$UV_SYSTEM_CERTS $UV_DEFAULT_INDEX"'],
                          env={"PATH": os.environ["PATH"], "HOME": str(tmp_path), "PIP_CONFIG_FILE": str(image_conf)},
                          capture_output=True, text=True, check=True)
    assert done.stdout.strip() == "1 https://proxy.example/simple"


# ------------------------------------------------------------ a real uv against a proxy's CA


def _certificates(folder: Path) -> tuple[Path, Path, Path]:
    """A CA of its own (as a company proxy has) and a certificate it signed for 127.0.0.1."""
    import datetime
    import ipaddress

    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

    now = datetime.datetime.now(datetime.timezone.utc)
    ca_key, key = ec.generate_private_key(ec.SECP256R1()), ec.generate_private_key(ec.SECP256R1())
    ca_name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "test proxy CA")])
    ca = (x509.CertificateBuilder().subject_name(ca_name).issuer_name(ca_name).public_key(ca_key.public_key())
          .serial_number(x509.random_serial_number()).not_valid_before(now - datetime.timedelta(hours=1))
          .not_valid_after(now + datetime.timedelta(days=1))
          .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
          .add_extension(x509.KeyUsage(False, False, False, False, False, True, True, False, False), critical=True)
          .sign(ca_key, hashes.SHA256()))
    server = (x509.CertificateBuilder().subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "index")]))
              .issuer_name(ca_name).public_key(key.public_key()).serial_number(x509.random_serial_number())
              .not_valid_before(now - datetime.timedelta(hours=1)).not_valid_after(now + datetime.timedelta(days=1))
              .add_extension(x509.SubjectAlternativeName([x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]),
                             critical=False)
              .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
              .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
              .sign(ca_key, hashes.SHA256()))
    paths = folder / "ca.pem", folder / "server.pem", folder / "server.key"
    paths[0].write_bytes(ca.public_bytes(serialization.Encoding.PEM))
    paths[1].write_bytes(server.public_bytes(serialization.Encoding.PEM))
    paths[2].write_bytes(key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                           serialization.NoEncryption()))
    return paths


@pytest.fixture
def https_index(tmp_path: Path):
    """A package index served over HTTPS with a certificate of a CA no trust store has."""
    import functools
    import http.server
    import ssl
    import threading

    from wheels import build_wheel

    root = tmp_path / "index"
    project = root / "simple" / "proxiedpkg"
    project.mkdir(parents=True)
    wheel = build_wheel(project, "proxiedpkg", "1.0", "VALUE = 7\n")
    (project / "index.html").write_text(f'<a href="{wheel.name}">{wheel.name}</a>\n')
    ca, cert, key = _certificates(tmp_path)
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(cert, key)
    handler = functools.partial(http.server.SimpleHTTPRequestHandler, directory=str(root))
    handler.log_message = lambda *args: None  # type: ignore[attr-defined]
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    server.socket = context.wrap_socket(server.socket, server_side=True)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"https://127.0.0.1:{server.server_address[1]}/simple", ca
    finally:
        server.shutdown()
        server.server_close()
        thread.join(10)


def test_a_runs_requirement_installs_from_an_index_behind_a_proxys_ca_that_pip_is_told_of(
        https_index, monkeypatch, tmp_path: Path) -> None:
    index, ca = https_index
    for name in ("SSL_CERT_FILE", "SSL_CERT_DIR", "PIP_CERT", "PIP_FIND_LINKS", "PIP_EXTRA_INDEX_URL",
                 "REQUESTS_CA_BUNDLE"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("PIP_CONFIG_FILE", os.devnull)  # only what this test tells pip
    monkeypatch.setenv("PIP_INDEX_URL", index)
    monkeypatch.setenv("UV_HTTP_RETRIES", "0")  # uv's own retries of the refused handshake
    with pytest.raises(environments.SetupFailed) as refused:  # pip is not told of the CA: neither is uv
        environments.prepare(["proxiedpkg==1.0"], root=tmp_path / "without")
    assert "certificate" in "\n".join(refused.value.lines).lower()
    assert not refused.value.transient  # said at once, not after retries that cannot mend it
    monkeypatch.setenv("PIP_CERT", str(ca))
    env = environments.prepare(["proxiedpkg==1.0"], root=tmp_path / "with")
    done = subprocess.run([env.python, "-c", "import proxiedpkg; print(proxiedpkg.VALUE)"], capture_output=True,
                          text=True, check=True)
    assert done.stdout == "7\n"


# ------------------------------------------------------------ an Artifact Registry index: the VM's token

AR_INDEX = "https://europe-west4-python.pkg.dev/my-proj/wheels/simple/"
AR_HOST = "europe-west4-python.pkg.dev"
TOKEN = "ya29.vm-token-never-printed"


@pytest.fixture
def only_the_ar_index(monkeypatch, tmp_path: Path) -> None:
    for name in list(os.environ):
        if name.startswith(("PIP_", "UV_")) or name == "NETRC":
            monkeypatch.delenv(name)
    monkeypatch.setenv("PIP_CONFIG_FILE", str(conf(tmp_path / "pip.conf", f"[global]\nindex-url = {AR_INDEX}\n")))


def test_a_runs_install_from_artifact_registry_signs_in_with_the_vms_token_off_the_command_line(
        monkeypatch, tmp_path: Path, only_the_ar_index, caplog) -> None:
    seen: dict[str, object] = {}

    def uv(argv, env, **options):  # what the host's uv is run with, and the credentials it finds
        netrc = Path(env["NETRC"])
        seen.update(argv=argv, env=env, netrc=netrc, text=netrc.read_text(), mode=netrc.stat().st_mode & 0o777)
        return subprocess.CompletedProcess(argv, 0, "", "")

    monkeypatch.setattr(environments.subprocess, "run", uv)
    with serve_metadata(TOKEN) as metadata:
        monkeypatch.setenv("GCE_METADATA_IP", metadata.address)
        environments._uv(["pip", "install", "pkg==1.0"], tmp_path)
        assert metadata.token_reads == 1
    assert seen["text"] == f"machine {AR_HOST} login {ARTIFACT_REGISTRY_USER} password {TOKEN}\n"
    assert seen["mode"] == 0o600 and not Path(seen["netrc"]).exists()  # gone with the call
    assert TOKEN not in " ".join(seen["argv"]) and not any(TOKEN in value for value in seen["env"].values())
    assert seen["env"]["UV_DEFAULT_INDEX"] == AR_INDEX and TOKEN not in caplog.text

    # No metadata server, no token: said, naming the index, and tried again (it may be back).
    monkeypatch.setenv("GCE_METADATA_IP", "127.0.0.1:9")
    with pytest.raises(environments.SetupFailed) as refused:
        environments._uv(["pip", "install", "pkg==1.0"], tmp_path)
    assert AR_HOST in refused.value.error and refused.value.transient


def test_the_boot_writes_the_vms_token_to_a_netrc_file_and_prints_only_its_name(tmp_path: Path) -> None:
    netrc = tmp_path / "etc" / "index-netrc"
    netrc.parent.mkdir()
    image = {"PATH": os.environ["PATH"], "HOME": str(tmp_path),
             "PIP_CONFIG_FILE": str(conf(tmp_path / "pip.conf", f"[global]\nextra-index-url = {AR_INDEX}\n"))}
    with serve_metadata(TOKEN) as metadata:
        done = subprocess.run(["python3", "-c", uv_settings_code(), "--netrc", str(netrc)],
                              env={**image, "PODMANAGER_METADATA_URL": metadata.root},
                              capture_output=True, text=True, check=True)
    assert f"export UV_INDEX={AR_INDEX}\n" in done.stdout and f"export NETRC={netrc}\n" in done.stdout
    assert TOKEN not in done.stdout + done.stderr
    assert netrc.read_text() == f"machine {AR_HOST} login {ARTIFACT_REGISTRY_USER} password {TOKEN}\n"
    assert netrc.stat().st_mode & 0o777 == 0o600

    unreachable = subprocess.run(["python3", "-c", uv_settings_code(), "--netrc", str(tmp_path / "other")],
                                 env={**image, "PODMANAGER_METADATA_URL": "http://127.0.0.1:9/computeMetadata/v1"},
                                 capture_output=True, text=True)
    assert unreachable.returncode == 1 and AR_HOST in unreachable.stderr and not (tmp_path / "other").exists()
    # Without an Artifact Registry index no token is asked for and no file written.
    plain = subprocess.run(["python3", "-c", uv_settings_code(), "--netrc", str(tmp_path / "none")],
                           env={**image, "PIP_CONFIG_FILE": os.devnull}, capture_output=True, text=True, check=True)
    assert "NETRC" not in plain.stdout and not (tmp_path / "none").exists()


def test_uv_and_pip_sign_in_to_an_index_with_the_netrc_file(tmp_path: Path) -> None:
    netrc = tmp_path / "netrc"
    with serve_index(tmp_path / "index", required=f"{ARTIFACT_REGISTRY_USER}:{TOKEN}") as index:
        index.add("signedpkg", "1.0")
        write_netrc(netrc, ["127.0.0.1"], TOKEN)
        base = {"PATH": os.environ["PATH"], "HOME": str(tmp_path), "PIP_CONFIG_FILE": os.devnull,
                "UV_CACHE_DIR": str(tmp_path / "uv"), "UV_DEFAULT_INDEX": index.url}
        (tmp_path / "in.txt").write_text("signedpkg\n")
        compile_ = uv_argv(["pip", "compile", "--quiet", "--no-header", str(tmp_path / "in.txt")])
        refused = subprocess.run(compile_, env=base, capture_output=True, text=True)
        assert refused.returncode != 0  # 401 without the file
        done = subprocess.run(compile_, env={**base, "NETRC": str(netrc)}, capture_output=True, text=True)
        assert done.returncode == 0 and done.stdout.startswith("signedpkg==1.0"), done.stderr
        # pip (which installs uv at boot) reads the same file.
        pip = subprocess.run(["python3", "-m", "pip", "download", "--quiet", "--no-deps", "-d", str(tmp_path / "dl"),
                              "--index-url", index.url, "signedpkg"],
                             env={**base, "NETRC": str(netrc)}, capture_output=True, text=True)
        assert pip.returncode == 0, pip.stderr
    assert f"{ARTIFACT_REGISTRY_USER}:{TOKEN}" in index.credentials
