from podmanager.cli import main

main()
