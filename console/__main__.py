from console.cli import main

main()
